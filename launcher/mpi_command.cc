#include "mpi_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "network.h"
#include "process.h"
#include "remote.h"
#include "usage_error.h"
#include "tuning_env.h"
#include "worker_env.h"

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
  // --start-timeout is accepted (as by horovodrun); Options::notices says
  // that mpirun, not kolorun, starts the ranks.
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
  if (o.bindingArgs.empty()) {
    argv.insert(argv.end(), {"--bind-to", "none"});
  } else {
    for (auto& a : splitCommandLine(o.bindingArgs)) argv.push_back(std::move(a));
  }
  argv.push_back("--tag-output");
  if (o.prefixTimestamp) argv.push_back("--timestamp-output");
  if (!o.outputDir.empty()) argv.insert(argv.end(), {"--output-filename", o.outputDir});
  if (!o.networkInterfaces.empty()) {
    std::string nics;
    for (const auto& nic : o.networkInterfaces) nics += (nics.empty() ? "" : ",") + nic;
    argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", nics});
  }
  if (!o.rsh.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_agent", o.rsh});
  std::string rshArgs;
  if (o.sshPort != 0) rshArgs += "-p " + std::to_string(o.sshPort);
  if (!o.sshIdentity.empty()) rshArgs += (rshArgs.empty() ? "" : " ") + ("-i " + o.sshIdentity);
  if (!rshArgs.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_args", rshArgs});
  for (const auto& [name, value] : tuningEnv(o)) {
    argv.insert(argv.end(), {"-x", name + "=" + value});
  }
  if (context.servesStore) {
    for (const auto& name : kStoreVariables) argv.insert(argv.end(), {"-x", name});
  }
  for (const auto& name : context.forwardedNames) argv.insert(argv.end(), {"-x", name});
  for (const auto& e : o.exportEnv) argv.insert(argv.end(), {"-x", e});
  for (auto& a : splitCommandLine(o.mpiArgs)) argv.push_back(std::move(a));
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

namespace {

// Where the ranks reach kolorun's store: as for kolorun's own jobs.
RendezvousEndpoint storeEndpoint(const Options& o) {
  const LocalNames local = localNames();
  std::vector<std::string> remote;
  for (const auto& h : hostsOf(o)) {
    if (!isLocalHost(h.host, local) &&
        std::find(remote.begin(), remote.end(), h.host) == remote.end()) {
      remote.push_back(h.host);
    }
  }
  return chooseRendezvous(remote, o.networkInterface);
}

// kolorun's environment with the store's variables set.
std::vector<std::string> mpirunEnvironment(
    const std::vector<std::pair<std::string, std::string>>& store) {
  std::vector<std::string> env;
  for (auto& entry : currentEnvironment()) {
    const std::string name = entry.substr(0, entry.find('='));
    if (std::find(kStoreVariables.begin(), kStoreVariables.end(), name) == kStoreVariables.end()) {
      env.push_back(std::move(entry));
    }
  }
  for (const auto& [name, value] : store) env.push_back(name + "=" + value);
  return env;
}

// In the forked child: only async-signal-safe calls (kolorun has threads).
[[noreturn]] void execChild(char* const argv[], char* const envp[]) {
  // kolorun blocked the job signals for itself; mpirun needs them.
  sigset_t none;
  sigemptyset(&none);
  signal(SIGPIPE, SIG_DFL);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(argv[0], argv, envp);
  static const char kFailed[] = "kolorun --mpi: cannot run mpirun\n";
  (void)!write(STDERR_FILENO, kFailed, sizeof(kFailed) - 1);
  _exit(127);
}

std::vector<char*> pointers(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

int exitCodeOf(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int runMpirun(const Options& options) {
  const char* path = std::getenv("PATH");
  auto mpirun = findProgram("mpirun", path != nullptr ? path : "/usr/bin:/bin");
  if (!mpirun) {
    throw UsageError("kolorun --mpi: 'mpirun' not found on PATH; install OpenMPI "
                     "(openmpi-bin) or run without --mpi");
  }
  MpiCommandContext context;
  context.mpirun = *mpirun;
  context.isRoot = geteuid() == 0;
  context.servesStore = true;
  for (const auto& entry : currentEnvironment()) {
    const std::string name = entry.substr(0, entry.find('='));
    const bool setting = name.rfind("KOLO_", 0) == 0 || name.rfind("HOROVOD_", 0) == 0;
    if (setting &&
        std::find(kStoreVariables.begin(), kStoreVariables.end(), name) == kStoreVariables.end()) {
      context.forwardedNames.push_back(name);
    }
  }
  const std::vector<std::string> argv = mpirunCommand(options, context);

  const RendezvousEndpoint endpoint = storeEndpoint(options);
  const std::string secret = randomSecret();
  auto server = serveRendezvous(endpoint, options.port, secret);
  const std::vector<std::string> env =
      mpirunEnvironment({{kStoreVariables[0], endpoint.addr},
                         {kStoreVariables[1], std::to_string(server->port())},
                         {kStoreVariables[2], secret},
                         {kStoreVariables[3], "1"}});
  std::vector<char*> rawArgv = pointers(argv), rawEnv = pointers(env);

  if (options.verbose) std::fprintf(stderr, "kolorun: %s\n", describeCommand(argv).c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = fork();
  if (child < 0) throw std::system_error(errno, std::generic_category(), "fork");
  if (child == 0) execChild(rawArgv.data(), rawEnv.data());

  // The job signals stay blocked here (blockJobSignals) and are taken one
  // by one. mpirun shares kolorun's process group, so a Ctrl-C from the
  // terminal reaches it directly; a signal another process sent to kolorun
  // alone is passed on.
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&set, sig);
  while (true) {
    int status = 0;
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) return exitCodeOf(status);
    if (done < 0 && errno != EINTR) {
      throw std::system_error(errno, std::generic_category(), "waitpid(mpirun)");
    }
    siginfo_t info{};
    const timespec tick{0, 200 * 1000 * 1000};  // waitpid again at least this often
    const int sig = sigtimedwait(&set, &info, &tick);
    if (sig > 0 && sig != SIGCHLD && info.si_code <= 0) kill(child, sig);  // sent by a process
  }
}

}  // namespace kolo::launcher
