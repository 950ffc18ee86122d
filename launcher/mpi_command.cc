#include "mpi_command.h"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "process.h"
#include "remote.h"
#include "usage_error.h"

namespace kolo::launcher {
namespace {

std::vector<HostSlots> hostsOf(const Options& o) {
  if (!o.hosts.empty()) return parseHostList(o.hosts);
  if (!o.hostfile.empty()) return readHostfile(o.hostfile);
  return {{"localhost", o.np}};
}

bool plainWord(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_./:=,@+%^", c))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::vector<std::string> mpirunCommand(const Options& o, const MpiCommandContext& context) {
  if (o.port != 0) throw UsageError("--port has no meaning with --mpi (no rendezvous store)");
  if (o.startTimeoutSeconds != 30) {
    throw UsageError("--start-timeout has no meaning with --mpi (mpirun starts the ranks)");
  }
  if (o.graceSeconds != 5) {
    throw UsageError("--grace-seconds has no meaning with --mpi (mpirun stops the ranks)");
  }
  const std::vector<HostSlots> hosts = hostsOf(o);
  int slots = 0;
  std::string hostList;
  for (const auto& h : hosts) {
    slots += h.slots;
    hostList += (hostList.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
  }
  const int np = o.np > 0 ? o.np : slots;

  std::vector<std::string> argv{context.mpirun};
  if (context.isRoot) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"-np", std::to_string(np), "-H", hostList});
  if (np > slots) argv.push_back("--oversubscribe");
  argv.insert(argv.end(), {"--bind-to", "none", "--tag-output"});
  if (o.prefixTimestamp) argv.push_back("--timestamp-output");
  if (!o.outputDir.empty()) argv.insert(argv.end(), {"--output-filename", o.outputDir});
  if (!o.networkInterface.empty()) {
    argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", o.networkInterface});
  }
  if (!o.rsh.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_agent", o.rsh});
  std::string rshArgs;
  if (o.sshPort != 0) rshArgs += "-p " + std::to_string(o.sshPort);
  if (!o.sshIdentity.empty()) rshArgs += (rshArgs.empty() ? "" : " ") + ("-i " + o.sshIdentity);
  if (!rshArgs.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_args", rshArgs});
  for (const auto& [name, value] : tuningEnv(o)) {
    argv.insert(argv.end(), {"-x", name + "=" + value});
  }
  for (const auto& e : o.exportEnv) argv.insert(argv.end(), {"-x", e});
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  return argv;
}

std::string describeCommand(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& a : argv) {
    line += (line.empty() ? "" : " ") + (plainWord(a) ? a : shellQuote(a));
  }
  return line;
}

void execMpirun(const Options& options) {
  const char* path = std::getenv("PATH");
  auto mpirun = findProgram("mpirun", path != nullptr ? path : "/usr/bin:/bin");
  if (!mpirun) {
    throw UsageError("kolorun --mpi: 'mpirun' not found on PATH; install OpenMPI "
                     "(openmpi-bin) or run without --mpi");
  }
  MpiCommandContext context;
  context.mpirun = *mpirun;
  context.isRoot = geteuid() == 0;
  const std::vector<std::string> argv = mpirunCommand(options, context);
  if (options.verbose) std::fprintf(stderr, "kolorun: %s\n", describeCommand(argv).c_str());
  std::fflush(stderr);
  std::vector<char*> raw;
  for (const auto& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  // kolorun blocked the job signals for its own loop; mpirun needs them.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
  execv(raw[0], raw.data());
  throw UsageError("kolorun --mpi: cannot run " + argv[0] + ": " + std::strerror(errno));
}

}  // namespace kolo::launcher
