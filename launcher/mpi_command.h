// kolorun --mpi: the job runs under mpirun instead of kolorun's own process
// management. kolorun builds the mpirun command line from its flags, prints
// it with --verbose and execs it; mpirun then starts, watches and stops the
// ranks. No rendezvous store is served (control and data go over MPI), so
// there is no secret to pass.
#pragma once

#include <string>
#include <vector>

#include "hosts.h"
#include "options.h"

namespace kolo::launcher {

struct MpiCommandContext {
  std::string mpirun = "mpirun";  // path or name of OpenMPI's mpirun
  bool isRoot = false;            // effective uid 0: --allow-run-as-root
};

// The full argv: mpirun, its flags, then the program and its arguments.
//   -np N -H host:slots,...     (hosts from -H/--hostfile, else localhost:N)
//   --oversubscribe             when N exceeds the slots given
//   --bind-to none              a rank bound to one core would starve kolo's
//                               background thread on small machines
//   --tag-output                "[job,rank]<stdout>:" prefixes
//   -x NAME=VALUE               every KOLO_* variable kolorun's flags set
//                               (KOLO_CONTROLLER=mpi, KOLO_CPU_OPERATIONS=mpi
//                               included), then the user's -x as given
//   --allow-run-as-root         when root
//   remote: --rsh, --ssh-port and --ssh-identity-file become
//   plm_rsh_agent / plm_rsh_args; --network-interface also restricts MPI's
//   TCP transport; --output-filename and --prefix-timestamp map to mpirun's.
// Flags without an MPI meaning (--port, --start-timeout, --grace-seconds)
// are refused with a UsageError.
std::vector<std::string> mpirunCommand(const Options& options, const MpiCommandContext& context);

// The command as one line a shell would read back (for --verbose).
std::string describeCommand(const std::vector<std::string>& argv);

// Builds the command for this process (mpirun from $PATH, root from
// geteuid()), prints it to stderr with --verbose, and replaces kolorun with
// it. Returns only on failure: a UsageError when mpirun cannot be found.
[[noreturn]] void execMpirun(const Options& options);

}  // namespace kolo::launcher
