#include "common/bounded_call.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

namespace kolo {

bool callWithin(std::chrono::milliseconds limit, std::function<void()> fn) {
  // Shared with the helper thread, which may outlive this call.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool returned = false;
  };
  auto state = std::make_shared<State>();
  std::thread([state, fn = std::move(fn)] {
    try {
      fn();
    } catch (...) {
      // Best-effort cleanup: the caller only learns whether it returned.
    }
    std::lock_guard<std::mutex> lock(state->mu);
    state->returned = true;
    state->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(state->mu);
  return state->cv.wait_for(lock, limit, [&] { return state->returned; });
}

void keepForever(std::shared_ptr<void> object) noexcept {
  // Never destroyed (no destructor runs at exit either): a device thread
  // may still use what is kept while the process ends.
  static std::mutex* mu = new std::mutex;
  static auto* kept = new std::vector<std::shared_ptr<void>>;
  try {
    std::lock_guard<std::mutex> lock(*mu);
    kept->push_back(std::move(object));
  } catch (...) {
    // Out of memory: leak it for certain instead (push_back left it as it was).
    auto* leaked = new (std::nothrow) std::shared_ptr<void>(std::move(object));
    (void)leaked;
  }
}

}  // namespace kolo
