// The process-level default engine behind kolo::init(). This is the one
// piece of process-wide state in kolo, kept here on purpose: the Engine
// itself has none, and tests construct engines directly.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <future>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "elastic/worker_client.h"
#include "kolo/kolo.h"
#include "kolo/tcp_store.h"

namespace kolo {
namespace {

struct DefaultEngine {
  std::timed_mutex mu;
  std::unique_ptr<TcpStoreServer> server;  // rank 0 under torchrun/Slurm
  std::unique_ptr<Engine> engine;
  std::chrono::milliseconds exitBound{0};  // KOLO_TIMEOUT of the engine's init()
  pid_t owner = 0;                         // the process that called init()
  bool atexitRegistered = false;
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
  std::lock_guard<std::timed_mutex> lock(s.mu);
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
  s.exitBound = config.timeout;
  s.owner = getpid();
  if (!s.atexitRegistered) {
    // Registered after the engine (and so the CUDA runtime it started):
    // atexit runs it first, before the runtime's own teardown and before
    // static destruction.
    std::atexit([] { shutdownAtExit(); });
    s.atexitRegistered = true;
  }
  std::terminate_handler installed = std::get_terminate();
  if (installed != abortPeersThenTerminate) {
    previousTerminate = installed;
    std::set_terminate(abortPeersThenTerminate);
  }
}

void shutdown() {
  auto& s = state();
  std::lock_guard<std::timed_mutex> lock(s.mu);
  if (!s.engine) return;
  liveEngine = nullptr;
  s.engine->shutdown();
  s.engine.reset();
  s.server.reset();
}

void shutdownAtExit() noexcept {
  auto& s = state();
  std::unique_lock<std::timed_mutex> lock(s.mu, std::defer_lock);
  // Another thread in init() or shutdown() at exit: leave the engine to it.
  if (!lock.try_lock_for(std::chrono::seconds(1)) || !s.engine) return;
  // A child forked after init() exiting: the engine's threads are the
  // parent's; touching it here could only hang.
  if (getpid() != s.owner) return;
  liveEngine = nullptr;
  const auto bound = s.exitBound;
  // A thread of its own owns the engine while it shuts down, so that this
  // one can stop waiting; it is joined when it finishes in time.
  auto finished = std::make_shared<std::promise<void>>();
  std::future<void> done = finished->get_future();
  std::thread stopper([engine = s.engine.release(), server = s.server.release(), finished] {
    try {
      engine->shutdown();
    } catch (...) {
      // Exiting: nobody left to tell.
    }
    delete engine;
    delete server;
    finished->set_value();
  });
  if (done.wait_for(bound) == std::future_status::ready) {
    stopper.join();
    return;
  }
  stopper.detach();
  std::fprintf(stderr,
               "kolo: shutdown at exit did not finish within KOLO_TIMEOUT (%.1f s): a completion "
               "callback or the GPU is hung; ending the process without it (exit code 1)\n",
               std::chrono::duration<double>(bound).count());
  std::fflush(stderr);
  std::_Exit(1);
}

bool isInitialized() {
  auto& s = state();
  std::lock_guard<std::timed_mutex> lock(s.mu);
  return s.engine != nullptr;
}

Engine& defaultEngine() {
  auto& s = state();
  std::lock_guard<std::timed_mutex> lock(s.mu);
  if (!s.engine) {
    throw InvalidArgument("kolo::init() has not been called (or kolo::shutdown() already was); "
                          "call kolo::init() first");
  }
  return *s.engine;
}

namespace elastic::detail {
WorkerClient* processClient() {
  auto& s = state();
  std::lock_guard<std::timed_mutex> lock(s.mu);
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
