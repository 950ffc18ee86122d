// Per-device state of the GPU path: the comm stream, the fusion buffer
// (allocated once per device, grown rarely), pinned host staging and the
// batched copy kernel's descriptors. One DeviceSet per Engine: no globals,
// so several engines (ranks as threads) can share a process.
//
// Threading: loop thread only (the engine's background thread), except
// where a method says otherwise. Every kernel, copy and (for NCCL) every
// collective of one device is ordered on that device's comm stream, so
// pack -> collective -> unpack needs no events between them.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "comm/cuda/copy_plan.h"
#include "comm/cuda/memory.h"
#include "kolo/types.h"

namespace kolo::comm::cuda {

class DeviceContext {
 public:
  // Creates the comm stream (non-blocking w.r.t. the legacy default stream,
  // highest priority) on device.
  explicit DeviceContext(int device);
  // Waits for the stream's work, then frees everything.
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  // The fusion buffer: at least bytes, reused across responses.
  void* fusion(size_t bytes) { return fusion_.data(bytes); }
  // Second device buffer (reduce-scatter input with a prescale, neutral
  // buffers of joined ranks).
  void* scratch(size_t bytes) { return scratch_.data(bytes); }
  // Pinned host staging for device tensors over a CPU backend. Callers
  // synchronise the stream before reusing it.
  void* staging(size_t bytes) { return staging_.data(bytes); }

  // One launch on stream(): every copy, transformed (copy_plan.h). copies'
  // pointers must be on this device. Returns without waiting.
  void batchedCopy(const std::vector<CopyDesc>& copies, DataType dtype,
                   const CopyTransform& transform);

  // One tensor: a cudaMemcpyAsync when transform is a plain copy (no
  // descriptor upload), else batchedCopy. Returns without waiting.
  void copy(const void* src, void* dst, uint64_t count, DataType dtype,
            const CopyTransform& transform);

  // The comm stream waits for event (recorded by a producer on any stream
  // of this device) without blocking the host.
  void waitEvent(cudaEvent_t event);
  // An event recorded on the stream now (after everything enqueued so
  // far), from a pool; alive while the pointer is held. Consumer streams
  // wait on it. timing: an event that times phases (cudaEventElapsedTime).
  std::shared_ptr<void> record(bool timing = false);
  // fn(arg) runs on a CUDA thread once the stream gets there
  // (cudaLaunchHostFunc): it must not call CUDA. Later work on the stream
  // waits until it returned.
  void launchHostFunc(void (*fn)(void*), void* arg);
  // Blocks the calling thread until the stream is idle; throws Internal on
  // a CUDA error (e.g. a faulting kernel).
  void synchronize();

 private:
  // Kernel descriptors travel from pinned host memory through a ring of
  // slots: a slot is written again only once its upload has run, so the
  // host waits only when kDescSlots launches are still queued on the stream.
  static constexpr int kDescSlots = 8;
  struct DescSlot {
    PinnedBuffer host;
    cudaEvent_t uploaded = nullptr;
    bool inFlight = false;
  };

  const int device_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer fusion_;
  DeviceBuffer scratch_;
  DeviceBuffer deviceDescs_;
  PinnedBuffer staging_;
  DescSlot descSlots_[kDescSlots];
  int nextDescSlot_ = 0;
  std::shared_ptr<EventPool> doneEvents_;
  std::shared_ptr<EventPool> timingEvents_;
};

class DeviceSet {
 public:
  // The context of device (>= 0), created on first use.
  DeviceContext& at(int device);

 private:
  std::map<int, std::unique_ptr<DeviceContext>> contexts_;
};

}  // namespace kolo::comm::cuda
