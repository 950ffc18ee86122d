// kolorun: starts a kolo job. See `kolorun --help` and docs/running/kolorun.md.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>

#include "elastic_job.h"
#include "hosts.h"
#include "job.h"
#include "kolo/error.h"
#include "kolo/tcp_store.h"
#include "mpi_command.h"
#include "network.h"
#include "options.h"
#include "plan.h"
#include "process.h"
#include "usage_error.h"

namespace {

// Workers inherit 0-2 through dup2; make sure they exist so a pipe never
// lands there.
void ensureStandardFds() {
  for (int fd = 0; fd < 3; ++fd) {
    if (fcntl(fd, F_GETFD) < 0) open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
  }
}

int runKolorun(int argc, char** argv) {
  using namespace kolo::launcher;
  ParsedCommandLine parsed = parseCommandLine(argc, argv);
  if (!parsed.options) return parsed.exitCode;
  const Options& options = *parsed.options;
  // Horovod flags kolo follows differently: one line each, before anything runs.
  for (const auto& notice : options.notices)
    std::fprintf(stderr, "kolorun: note: %s\n", notice.c_str());
  if (options.mpi) return runMpirun(options);  // mpirun runs the job
  if (options.elastic()) return runElasticJob(options);

  std::vector<std::string> inherited = currentEnvironment();
  const char* path = std::getenv("PATH");
  JobPlan plan = makePlan(options, localNames(), path != nullptr ? path : "/usr/bin:/bin");
  RendezvousEndpoint endpoint = chooseRendezvous(plan.remoteHosts, options.networkInterface);

  std::string secret = randomSecret();
  auto server = serveRendezvous(endpoint, options.port, secret);
  RendezvousInfo rendezvous{endpoint.addr, server->port(), secret};
  // torch.distributed's env:// (init_process_group): rank 0 serves torch's
  // store on a port free here; -x MASTER_PORT=N chooses another.
  rendezvous.torchAddr = !plan.remote.empty() && plan.remote[0] ? plan.ranks[0].host
                         : plan.remoteHosts.empty()           ? std::string("127.0.0.1")
                                                              : endpoint.addr;
  rendezvous.torchPort = freeTcpPort();
  Job job(options, std::move(plan), rendezvous, server->localStore(), std::move(inherited));
  return job.run();
}

}  // namespace

int main(int argc, char** argv) {
  ensureStandardFds();
  // Before any thread exists (the store server starts some), so every thread
  // leaves these signals to the job loop's signalfd.
  kolo::launcher::blockJobSignals();
  try {
    return runKolorun(argc, argv);
  } catch (const kolo::launcher::UsageError& e) {
    std::fprintf(stderr, "kolorun: %s\n", e.what());
    return kolo::launcher::kUsageExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kolorun: %s\n", e.what());
    return 1;
  }
}
