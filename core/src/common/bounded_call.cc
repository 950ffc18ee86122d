#include "common/bounded_call.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

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

}  // namespace kolo
