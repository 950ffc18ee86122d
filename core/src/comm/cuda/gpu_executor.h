// GpuExecutor: what the engine's Executor calls for a response whose
// device is DeviceKind::kCuda. It mirrors the CPU paths of executor.cc with
// device-side packing: one batched-copy launch packs a fused response into
// the device's fusion buffer applying the prescale (and writing a joined
// rank's neutral values), the GPU collectives reduce it, one launch unpacks
// it applying the postscale (1/size or an integer division for average
// when the backend has no native average).
//
// Stream contract: everything runs on the device's comm stream
// (DeviceSet). Inputs must be ready on that stream first: call waitReady()
// with the producer's event (the LibTorch adapter records one on the
// caller's current stream in the gradient hook). A response ends with
// endResponse(): a done event for consumers' streams (cudaStreamWaitEvent)
// and a fence of the device's CompletionWatcher, whose thread runs
// whenDone's callback once it learns the device got there: from a waiter
// that saw the done event (FenceProbe), or from a host function that
// flushSignals places on the stream after the fences (gpu_ops.h). The host
// never waits for the device on this path (staging over gloo/mpi does, for
// its host copies); NCCL's asynchronous error, the device's sticky fault
// and KOLO_TIMEOUT bound every wait in the watcher, which on any of them
// aborts the communicator and drains the comm streams before a failed
// callback runs (so nothing is released while the device may still touch
// it).
//
// Every runtime call goes through the DeviceSet's device::Runtime: CUDA
// for users, the host runtime in tests.
//
// Lifetime: a host function (and a fence's probe) points at a relay, never
// at the watcher itself. The device's DeviceContext keeps the relay until its stream is
// destroyed (after the last host function ran); the destructor detaches
// the relays, so a host function that runs late (a drain that ran out of
// time) finds nothing to signal.
//
// Threading: loop thread only, every rank in the same response order (the
// collectives inside are collective calls); whenDone callbacks on the
// watcher's thread.
#pragma once

#include <chrono>
#include <deque>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/collectives.h"
#include "common/completion_watcher.h"
#include "comm/cuda/device_set.h"
#include "comm/cuda/gpu_ops.h"
#include "kolo/types.h"

namespace kolo::comm::cuda {

class GpuExecutor final : public GpuOps {
 public:
  // collectives: built by comm::createGpuCollectives (nccl, or mpi/gloo
  // over pinned staging) on the same DeviceSet.
  // timeout: how long a response's GPU work may take (KOLO_TIMEOUT).
  GpuExecutor(std::shared_ptr<DeviceSet> devices, std::unique_ptr<comm::Collectives> collectives,
              int rank, int size,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(60000));
  // Waits (bounded by the timeout) until the work of every fence settled
  // and its callback ran, then stops the watchers.
  ~GpuExecutor() override;

  const char* name() const override { return collectives_->name(); }
  comm::Collectives& collectives() { return *collectives_; }
  DeviceContext& context(int device) { return devices_->at(device); }

  void pin(int device, const std::string& what) override { devices_->pin(device, what); }
  int pinned() const override { return devices_->pinned(); }
  int deviceCount() override { return devices_->runtime().deviceCount(); }
  // The comm stream of device waits for event; the host does not block.
  void waitReady(int device, void* event) override;
  bool captured(int device, void* event) override;

  // Fused allreduce of tensors (same dtype); op may be kAverage. A single
  // non-joined tensor is reduced in place in its output (no fusion copy).
  void allreduce(int device, const std::vector<DeviceTensor>& tensors, DataType dtype,
                 ReduceOp op, double prescale, double postscale) override;
  // tensor.output receives root's tensor.input; on the root input is copied
  // to output first when they differ.
  void broadcast(int device, const DeviceTensor& tensor, DataType dtype, int root) override;
  void allgatherv(int device, const void* in, void* out, const std::vector<size_t>& counts,
                  DataType dtype) override;
  void alltoallv(int device, const void* in, const std::vector<size_t>& sendCounts, void* out,
                 const std::vector<size_t>& recvCounts, DataType dtype) override;
  // in holds sum(counts) elements, out receives counts[rank]; op may be
  // kAverage. in == nullptr: a joined rank (the op's identity goes in, out
  // is ignored). For allgatherv/alltoallv out == nullptr receives into
  // scratch (a joined rank).
  void reducescatter(int device, const void* in, void* out, const std::vector<size_t>& counts,
                     DataType dtype, ReduceOp op, double prescale, double postscale) override;

  void* stream(int device) override { return devices_->at(device).stream(); }
  void beginResponse(int device, bool timed) override;
  void markReady(int device) override { mark(device, GpuPhases::kReady); }
  GpuFence endResponse(int device) override;
  void flushSignals(std::chrono::steady_clock::time_point openedBefore) noexcept override;
  void whenDone(const GpuFence& fence, Done done) override;
  void abort(const Status& why) override;
  // Blocks until device's comm stream is idle (tests).
  void synchronize(int device) { devices_->at(device).synchronize(); }

 private:
  // How a reduction with op finishes after the backend call.
  struct Finish {
    ReduceOp backendOp;
    device::CopyTransform transform;  // applied to the reduced elements
  };
  Finish finishFor(DataType dtype, ReduceOp op, double postscale) const;
  // Records phase's timing event when the current response is timed.
  void mark(int device, GpuPhases::Phase phase);
  // What a host function or a waiter reports to: the watcher while it
  // lives.
  struct Relay {
    std::mutex mu;
    CompletionWatcher* watcher = nullptr;  // guarded by mu; nullptr once detached
    // guarded by mu: the fence each host function queued on the stream
    // reports, in stream order (the order they run in).
    std::deque<uint64_t> covers;
    // The device got to fence: tell the watcher, if it is still there.
    // checked: CompletionWatcher::reach's.
    void reach(uint64_t fence, bool checked) {
      std::lock_guard<std::mutex> lock(mu);
      if (watcher != nullptr) watcher->reach(fence, checked);
    }
  };
  struct Watched {
    std::unique_ptr<CompletionWatcher> watcher;
    std::shared_ptr<Relay> relay;
    std::shared_ptr<FenceProbe> probe;  // the device's fences' (gpu_ops.h)
    uint64_t opened = 0;   // the last fence opened
    // The last fence a host function follows, or that waiters had
    // reported when one would have been placed.
    uint64_t covered = 0;
    // When the oldest fence not followed by a host function was opened.
    std::chrono::steady_clock::time_point uncoveredSince{};
  };
  Watched& watcher(int device);
  // Places a host function after w's fences so far (noexcept: a failure
  // fails the watcher's fences).
  void cover(int device, Watched& w) noexcept;
  // The host function that reports the oldest fence in a relay's covers
  // (arg: the Relay).
  static void signalRelay(void* relay);

  std::shared_ptr<DeviceSet> devices_;
  std::shared_ptr<comm::Collectives> collectives_;
  const int rank_;
  const int size_;
  const bool nativeAverage_;  // the backend reduces kAverage itself (ncclAvg)
  const std::chrono::milliseconds timeout_;
  // The current response's phase events (timed responses only).
  struct Timing {
    std::shared_ptr<void> events[GpuPhases::kCount];
  };
  std::shared_ptr<Timing> timing_;
  // One per device used; after collectives_ so they stop first.
  std::map<int, Watched> watchers_;
};

}  // namespace kolo::comm::cuda
