#include "device/host/clique.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "device/host/device_turns.h"

namespace kolo::device::host {

using Clock = std::chrono::steady_clock;

bool Clique::waitFor(std::unique_lock<std::mutex>& lock, Phase phase, Clock::time_point deadline) {
  return cv_.wait_until(lock, deadline, [&] { return phase_ == phase || !aborted_.empty(); });
}

std::vector<int> Clique::missing() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  if (phase_ != Phase::kCollect) return out;
  for (int m = 0; m < size_; ++m) {
    if (!arrived_[static_cast<size_t>(m)]) out.push_back(m);
  }
  return out;
}

Status Clique::run(int rank, int device, Part part, size_t outBytes, const Compute& compute,
                   std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  if (turns_ != nullptr && device >= 0) {
    // Outside mu_: DeviceTurns may abort this clique (its lock comes first).
    const Status taken = turns_->take(device, this, id_, rank, deadline);
    if (!taken.ok()) return taken;
    const Status s = collect(rank, part, outBytes, compute, deadline, timeout);
    turns_->give(device, rank);
    return s;
  }
  return collect(rank, part, outBytes, compute, deadline, timeout);
}

Status Clique::collect(int rank, Part part, size_t outBytes, const Compute& compute,
                       Clock::time_point deadline, std::chrono::milliseconds timeout) {
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
    arrived_[static_cast<size_t>(rank)] = true;
    if (++count_ == size_) {
      count_ = 0;
      std::fill(arrived_.begin(), arrived_.end(), false);
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
