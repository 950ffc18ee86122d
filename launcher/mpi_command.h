// kolorun --mpi: the job runs under mpirun instead of kolorun's own process
// management. kolorun builds the mpirun command line from its flags, prints
// it with --verbose and runs it; mpirun then starts, watches and stops the
// ranks. Control and data go over MPI; kolorun still serves the job's
// rendezvous store, so that ranks share their failure bookkeeping and a
// survivor can name a rank that hung (MPI alone cannot tell which peer went
// silent). The store's address and secret reach the ranks as environment
// variables exported by name (-x NAME), never on a command line.
#pragma once

#include <string>
#include <vector>

#include "hosts.h"
#include "options.h"

namespace kolo::launcher {

struct MpiCommandContext {
  std::string mpirun = "mpirun";  // path or name of OpenMPI's mpirun
  bool isRoot = false;            // effective uid 0: --allow-run-as-root
  bool servesStore = false;       // kolorun serves the store: export its variables
  // Variables of kolorun's environment that every rank must see (its KOLO_*
  // and HOROVOD_* settings), exported by name: mpirun passes only exported
  // variables to ranks on other hosts.
  std::vector<std::string> forwardedNames;
};

// What kolorun sets in mpirun's environment when it serves the store.
inline const std::vector<std::string> kStoreVariables = {
    "KOLO_RENDEZVOUS_ADDR", "KOLO_RENDEZVOUS_PORT", "KOLO_SECRET_KEY", "KOLO_RENDEZVOUS_HOSTED"};

// The full argv: mpirun, its flags, then the program and its arguments.
//   -np N -H host:slots,...     (hosts from -H/--hostfile, else localhost:N)
//   --oversubscribe             when N exceeds the slots given
//   --bind-to none              a rank bound to one core would starve kolo's
//                               background thread on small machines (or
//                               --binding-args, split as a shell would)
//   --tag-output                "[job,rank]<stdout>:" prefixes
//   -x NAME=VALUE               every KOLO_* variable kolorun's flags set
//                               (KOLO_CONTROLLER=mpi, KOLO_CPU_OPERATIONS=mpi
//                               included)
//   -x NAME                     with servesStore, each of kStoreVariables
//                               (their values stay in the environment),
//                               then each of forwardedNames
//   -x ...                      then the user's -x as given
//   ...                         then --mpi-args, split as a shell would
//   --allow-run-as-root         when root
//   remote: --rsh, --ssh-port and --ssh-identity-file become
//   plm_rsh_agent / plm_rsh_args; --network-interface(s) also restrict MPI's
//   TCP transport (all of them); --output-filename and --prefix-timestamp
//   map to mpirun's.
// --grace-seconds (kolo's own) has no MPI meaning and is refused with a
// UsageError; --start-timeout is accepted with a notice, as horovodrun
// takes it; --port is the store's.
std::vector<std::string> mpirunCommand(const Options& options, const MpiCommandContext& context);

// The command as one line a shell would read back (for --verbose).
std::string describeCommand(const std::vector<std::string>& argv);

// Serves the rendezvous store, builds the command (mpirun from $PATH, root
// from geteuid()), prints it to stderr with --verbose, runs it and waits.
// Signals sent to kolorun by another process are passed on to mpirun (those
// from the terminal reach it directly). Returns mpirun's exit code (128 +
// signal when a signal ended it); throws UsageError when mpirun cannot be
// found or the store cannot be served.
int runMpirun(const Options& options);

}  // namespace kolo::launcher
