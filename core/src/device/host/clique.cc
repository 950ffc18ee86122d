#include "device/host/clique.h"

#include <cstring>
#include <utility>

namespace kolo::device::host {

using Clock = std::chrono::steady_clock;

bool Clique::waitFor(std::unique_lock<std::mutex>& lock, Phase phase, Clock::time_point deadline) {
  return cv_.wait_until(lock, deadline, [&] { return phase_ == phase || !aborted_.empty(); });
}

Status Clique::run(int rank, Part part, size_t outBytes, const Compute& compute,
                   std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto fail = [&](std::unique_lock<std::mutex>& lock) {
    if (aborted_.empty()) {
      aborted_ = "host collective: a member did not arrive within " +
                 std::to_string(timeout.count()) + " ms";
      cv_.notify_all();
    }
    (void)lock;
    return Status{ErrorCode::kPeerFailure, aborted_};
  };
  std::vector<char> result;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // The previous collective's members have all left.
    if (!waitFor(lock, Phase::kCollect, deadline) || !aborted_.empty()) return fail(lock);
    parts_[static_cast<size_t>(rank)] = part;
    if (++count_ == size_) {
      count_ = 0;
      phase_ = Phase::kCompute;
      cv_.notify_all();
    }
    if (!waitFor(lock, Phase::kCompute, deadline) || !aborted_.empty()) return fail(lock);
    const std::vector<Part> parts = parts_;
    lock.unlock();
    result.resize(outBytes);
    compute(parts, result);
    lock.lock();
    if (!aborted_.empty()) return fail(lock);
    if (++count_ == size_) {
      count_ = 0;
      phase_ = Phase::kWrite;
      cv_.notify_all();
    }
    // Nobody reads the inputs any more once every member computed.
    if (!waitFor(lock, Phase::kWrite, deadline) || !aborted_.empty()) return fail(lock);
  }
  if (outBytes > 0) std::memcpy(part.out, result.data(), outBytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (++count_ == size_) {
    count_ = 0;
    phase_ = Phase::kCollect;
    cv_.notify_all();
  }
  return Status::Ok();
}

void Clique::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.empty()) aborted_ = why;
  cv_.notify_all();
}

}  // namespace kolo::device::host
