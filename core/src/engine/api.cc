// The process-level default engine behind kolo::init(). This is the one
// piece of process-wide state in kolo, kept here on purpose: the Engine
// itself has none, and tests construct engines directly.
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <mutex>

#include "elastic/worker_client.h"
#include "kolo/kolo.h"
#include "kolo/tcp_store.h"

namespace kolo {
namespace {

struct DefaultEngine {
  std::mutex mu;
  std::unique_ptr<TcpStoreServer> server;  // rank 0 under torchrun/Slurm
  std::unique_ptr<Engine> engine;
  // Elastic workers (kolorun's elastic driver): kept across shutdown/init.
  std::unique_ptr<elastic::detail::WorkerClient> elastic;
  std::vector<std::vector<int>> elasticSets;  // static sets of every elastic world
};

DefaultEngine& state() {
  static DefaultEngine s;
  return s;
}

// The default engine while it lives, for the terminate handler (which must
// not take state().mu: terminate may run while it is held).
std::atomic<Engine*> liveEngine{nullptr};
std::terminate_handler previousTerminate = nullptr;

// A rank that dies of an uncaught exception (say, thrown from a gradient
// hook and out of backward()) tells the other ranks why before the previous
// handler (normally abort) runs; otherwise they would only see a lost
// connection and name the rank without the reason.
[[noreturn]] void abortPeersThenTerminate() {
  static std::atomic<bool> once{false};
  Engine* engine = liveEngine.load();
  if (engine != nullptr && !once.exchange(true)) {
    std::string why = "terminated (std::terminate called)";
    if (std::exception_ptr error = std::current_exception()) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        why = std::string("uncaught exception: ") + e.what();
      } catch (...) {
        why = "uncaught exception of a type not derived from std::exception";
      }
    }
    try {
      engine->abort(why);
    } catch (...) {
      // Terminating anyway; peers then see the lost connection.
    }
  }
  if (previousTerminate != nullptr) previousTerminate();
  std::abort();
}

}  // namespace

std::shared_ptr<Store> connectLaunchStore(const LaunchInfo& info, std::chrono::milliseconds timeout,
                                          std::unique_ptr<TcpStoreServer>& server) {
  const Rendezvous& rv = info.rendezvous;
  if (rv.addr.empty()) return makeHashStore();
  if (rv.hostServer) server = std::make_unique<TcpStoreServer>("", rv.port, rv.secret);
  TcpStoreOptions options;
  options.connectTimeout = timeout;
  return makeTcpStore(rv.addr, rv.port, rv.secret, options);
}

void init(std::vector<std::vector<int>> processSets) {
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
  if (info.elasticWorker >= 0) {
    // The world (rank, size, store prefix) comes from the elastic driver;
    // the process sets given to the first init() are rebuilt in every world.
    if (!s.elastic) {
      s.elastic = std::make_unique<elastic::detail::WorkerClient>(info, config);
      s.elasticSets = std::move(processSets);
    }
    s.engine = s.elastic->startEngine(config, s.elasticSets);
  } else {
    std::unique_ptr<TcpStoreServer> server;
    auto store = connectLaunchStore(info, config.timeout, server);
    s.engine = std::make_unique<Engine>(config, info.identity, store, std::move(processSets));
    s.server = std::move(server);
  }
  liveEngine = s.engine.get();
  std::terminate_handler installed = std::get_terminate();
  if (installed != abortPeersThenTerminate) {
    previousTerminate = installed;
    std::set_terminate(abortPeersThenTerminate);
  }
}

void shutdown() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.engine) return;
  liveEngine = nullptr;
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

namespace elastic::detail {
WorkerClient* processClient() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.elastic.get();
}
}  // namespace elastic::detail

int rank() { return defaultEngine().identity().rank; }
int size() { return defaultEngine().identity().size; }
int localRank() { return defaultEngine().identity().localRank; }
int localSize() { return defaultEngine().identity().localSize; }
int crossRank() { return defaultEngine().identity().crossRank; }
int crossSize() { return defaultEngine().identity().crossSize; }

}  // namespace kolo
