// GpuPath: how the Executor runs a response on CUDA tensors. It maps the
// response onto comm::cuda::GpuOps (device-side packing with the batched
// kernel, prescale and postscale applied there, the collective of
// KOLO_GPU_OPERATIONS, unpacking) on the device's comm stream.
//
// Streams: the comm stream first waits (cudaStreamWaitEvent, not the host)
// on each tensor's Entry::readyEvent. Outputs whose size is negotiated are
// allocated while outputAllocationStream() names the comm stream. execute()
// returns once the response's GPU work is enqueued, with its fence: the
// done event consumers' streams wait on, and whenDone() to learn (on the
// device's completion thread) when the work finished or failed. The host
// never waits for the device here (staging over gloo/mpi synchronises the
// comm stream around its host copies).
//
// The GpuOps are created on first use, i.e. at the first CUDA response of
// the process set: every member executes it at the same point of the set's
// response order, so the data plane's connection setup lines up.
//
// Refused (InvalidArgument, which fails the engine on every rank): a
// tensor on another device than the rank's first CUDA tensor (kolo drives
// one GPU per rank), and a ready event recorded while the producer's
// stream was being captured into a CUDA graph. When a response throws
// after some of its work was enqueued, the GPU work in flight is aborted
// and drained before the exception leaves (nothing is released while the
// device may still touch it).
//
// Threading: loop thread only (whenDone callbacks run on the completion
// thread).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "comm/cuda/gpu_ops.h"
#include "execution/pending.h"
#include "kolo/engine.h"
#include "wire/message.h"

namespace kolo {

class GpuPath {
 public:
  using Factory = std::function<std::unique_ptr<comm::cuda::GpuOps>()>;

  // identity: this rank's place in the process set. factory: builds the
  // GPU data plane (comm::createGpuOps); empty when this build has none.
  // defaultDevice: the device a rank that has joined uses before it has
  // seen a CUDA tensor of its own (the job's local rank).
  GpuPath(const Identity& identity, Factory factory, EngineStats& stats, int defaultDevice);
  ~GpuPath();

  // As Executor::execute, for r.device == kCuda. timed: record when the
  // GPU phases ran (whenDone's GpuPhases), for the timeline.
  comm::cuda::GpuFence execute(const Response& r, const std::vector<PendingOp*>& ops, bool timed);
  // Calls done once fence's work finished or failed (GpuOps::whenDone).
  void whenDone(const comm::cuda::GpuFence& fence, comm::cuda::GpuOps::Done done);
  // GpuOps::flushSignals, when the GPU path exists.
  void flushSignals(std::chrono::steady_clock::time_point openedBefore) noexcept {
    if (gpu_) gpu_->flushSignals(openedBefore);
  }
  // GpuOps::abort, when the GPU path exists.
  void abort(const Status& why) {
    if (gpu_) gpu_->abort(why);
  }

  // The data plane's name once created ("nccl", "gloo+staging", ...), else "".
  const char* name() const;

 private:
  comm::cuda::GpuOps& gpu();
  // The device of this rank's tensors (all on the rank's pinned device:
  // checked), or the pinned one when this rank has joined.
  int deviceOf(const Response& r, const std::vector<PendingOp*>& ops);
  // Runs allocate with outputAllocationStream() set to device's comm stream.
  void* allocate(PendingOp& op, int device, const std::vector<int64_t>& shape);
  comm::cuda::GpuFence enqueue(const Response& r, const std::vector<PendingOp*>& ops, int device,
                               bool timed);

  void allreduce(const Response& r, const std::vector<PendingOp*>& ops, int device);
  void broadcast(const Response& r, PendingOp* op, int device);
  void allgather(const Response& r, PendingOp* op, int device);
  void alltoall(const Response& r, PendingOp* op, int device);
  void reducescatter(const Response& r, PendingOp* op, int device);

  const Identity& identity_;
  Factory factory_;
  EngineStats& stats_;
  std::unique_ptr<comm::cuda::GpuOps> gpu_;
  int lastDevice_;
};

}  // namespace kolo
