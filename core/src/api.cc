// The process-level default engine behind kolo::init(). This is the one
// piece of process-wide state in kolo, kept here on purpose: the Engine
// itself has none, and tests construct engines directly.
#include <csignal>
#include <mutex>

#include "kolo/kolo.h"
#include "kolo/tcp_store.h"

namespace kolo {
namespace {

struct DefaultEngine {
  std::mutex mu;
  std::unique_ptr<TcpStoreServer> server;  // rank 0 under torchrun/Slurm
  std::unique_ptr<Engine> engine;
};

DefaultEngine& state() {
  static DefaultEngine s;
  return s;
}

std::shared_ptr<Store> connectStore(const LaunchInfo& info, const Config& config,
                                    std::unique_ptr<TcpStoreServer>& server) {
  const Rendezvous& rv = info.rendezvous;
  if (rv.addr.empty()) return makeHashStore();
  if (rv.hostServer) server = std::make_unique<TcpStoreServer>("", rv.port, rv.secret);
  TcpStoreOptions options;
  options.connectTimeout = config.timeout;
  return makeTcpStore(rv.addr, rv.port, rv.secret, options);
}

}  // namespace

void init() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.engine) {
    throw InvalidArgument("kolo::init() was already called; call kolo::shutdown() first");
  }
  // A peer that dies mid-send must surface as an error naming it, not kill
  // this process with SIGPIPE: ignore SIGPIPE unless the program handles it.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    std::signal(SIGPIPE, SIG_IGN);
  }
  Config config = Config::fromEnv();
  LaunchInfo info = launchInfoFromEnv();
  std::unique_ptr<TcpStoreServer> server;
  auto store = connectStore(info, config, server);
  s.engine = std::make_unique<Engine>(config, info.identity, store);
  s.server = std::move(server);
}

void shutdown() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.engine) return;
  s.engine->shutdown();
  s.engine.reset();
  s.server.reset();
}

bool isInitialized() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.engine != nullptr;
}

Engine& defaultEngine() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.engine) {
    throw InvalidArgument("kolo::init() has not been called (or kolo::shutdown() already was); "
                          "call kolo::init() first");
  }
  return *s.engine;
}

int rank() { return defaultEngine().identity().rank; }
int size() { return defaultEngine().identity().size; }
int localRank() { return defaultEngine().identity().localRank; }
int localSize() { return defaultEngine().identity().localSize; }
int crossRank() { return defaultEngine().identity().crossRank; }
int crossSize() { return defaultEngine().identity().crossSize; }

}  // namespace kolo
