// The meeting point of the host runtime's collectives: `size` members,
// one collective at a time (what an NCCL communicator's kernels are to each
// other). HostRuntime keeps one per clique id; comm/host/collectives.h runs
// its collectives through it. A collective takes its member's device for
// its whole run (DeviceTurns), as a GPU runs one communicator's kernel at a
// time, so cliques issued in different orders on two devices fail.
//
// Threading: any thread; run() blocks until every member arrived or the
// clique was aborted.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "kolo/error.h"

namespace kolo::device::host {

class DeviceTurns;

// `size` members run one collective at a time: each contributes its
// buffers, computes its own result once all have, and leaves once all have
// computed (so no member overwrites a buffer another still reads).
class Clique {
 public:
  struct Part {
    const void* in = nullptr;
    void* out = nullptr;
  };
  // Computes member `rank`'s result from every member's part into
  // `result`; run() then copies it to the member's output.
  using Compute = std::function<void(const std::vector<Part>& parts, std::vector<char>& result)>;

  // id names the clique in messages; turns: the devices its members run on
  // (nullptr: no device turns, any number of collectives at once).
  Clique(int size, uint64_t id = 0, DeviceTurns* turns = nullptr)
      : size_(size),
        id_(id),
        turns_(turns),
        parts_(static_cast<size_t>(size)),
        arrived_(static_cast<size_t>(size), false) {}
  int size() const { return size_; }

  // One collective as member rank on device (-1: none, no turn taken); writes `outBytes` of the
  // result to part.out. Fails (nothing written) when the clique was
  // aborted, a member did not arrive within timeout (then it aborts the
  // clique), or device's turn would never come (DeviceTurns).
  Status run(int rank, int device, Part part, size_t outBytes, const Compute& compute,
             std::chrono::milliseconds timeout);
  // The same without a device: takes no device turn (tests of the clique).
  Status run(int rank, Part part, size_t outBytes, const Compute& compute,
             std::chrono::milliseconds timeout) {
    return run(rank, -1, part, outBytes, compute, timeout);
  }
  // The members the collective now collecting waits for (none once all came).
  std::vector<int> missing();
  // Every running and later run() fails with why.
  void abort(const std::string& why);

 private:
  enum class Phase { kCollect, kCompute, kWrite };
  bool waitFor(std::unique_lock<std::mutex>& lock, Phase phase,
               std::chrono::steady_clock::time_point deadline);
  // run() once the device is taken: the three phases.
  Status collect(int rank, Part part, size_t outBytes, const Compute& compute,
                 std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout);

  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  Phase phase_ = Phase::kCollect;  // guarded by mu_
  int count_ = 0;                  // guarded by mu_: members done with the phase
  const uint64_t id_;
  DeviceTurns* const turns_;
  std::vector<Part> parts_;        // guarded by mu_
  std::vector<bool> arrived_;      // guarded by mu_: by member, in the collect phase
  std::string aborted_;            // guarded by mu_
};

}  // namespace kolo::device::host
