// Runs negotiated responses on this rank: packs inputs into the fusion
// buffer, calls the data-plane collective, applies scales, unpacks outputs
// and completes handles. Loop thread only.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "comm/collectives.h"
#include "execution/adasum.h"
#include "execution/fusion_buffer.h"
#include "execution/gpu_path.h"
#include "kolo/engine.h"
#include "wire/message.h"
#include "execution/pending.h"
#include "timeline/timeline.h"

namespace kolo {

class Executor {
 public:
  // gpu: the data plane for CUDA tensors, created at the first CUDA
  // response (empty: this build has none); gpuDevice: the device a joined
  // rank uses before it has seen a CUDA tensor (the job's local rank).
  Executor(const Identity& identity, std::unique_ptr<comm::Collectives> collectives,
           EngineStats& stats, GpuPath::Factory gpu = {}, int gpuDevice = 0);

  // ops[i] is this rank's operation for response.names[i], or nullptr when
  // this rank has joined and contributes a neutral value. Fills results into
  // the ops' handle states (shape, splits) but does not complete them; throws
  // on backend failure (the engine then fails the job). CPU responses are
  // done when this returns (the fence's id is 0). Responses on CUDA tensors
  // go to the GPU path (execution/gpu_path.h) and are only enqueued: the
  // caller hands the fence to whenGpuDone.
  comm::cuda::GpuFence execute(const Response& response, const std::vector<PendingOp*>& ops);
  void whenGpuDone(const comm::cuda::GpuFence& fence, comm::cuda::GpuOps::Done done) {
    gpu_.whenDone(fence, std::move(done));
  }
  // GpuOps::flushSignals (gpu_ops.h): the GPU work's fences opened before
  // openedBefore get a host function that reports them.
  void flushGpuSignals(std::chrono::steady_clock::time_point openedBefore) noexcept {
    gpu_.flushSignals(openedBefore);
  }
  // Stops the GPU work in flight; its ops fail with why.
  void abortGpu(const Status& why) { gpu_.abort(why); }
  // After execute(): the timeline rows of the response's traced ops and the
  // name of its collective span ("NCCL_ALLREDUCE"); empty when untraced.
  const std::vector<int>& tracedRows() const { return rows_; }
  const char* collectiveSpan() const { return collectiveSpan_; }

  comm::Collectives& collectives() { return *collectives_; }

  // Records fusion-buffer copies and backend calls of traced ops there;
  // nullptr: off. The timeline must outlive its use here.
  void setTimeline(timeline::Timeline* timeline) {
    timeline_ = timeline;
    spanNames_.fill(nullptr);
    gpuSpanNames_.fill(nullptr);
  }

 private:
  void allreduce(const Response& r, const std::vector<PendingOp*>& ops);
  void broadcast(const Response& r, PendingOp* op);
  void allgather(const Response& r, PendingOp* op);
  void alltoall(const Response& r, PendingOp* op);
  void reducescatter(const Response& r, PendingOp* op);

  // Timeline spans on the rows of the traced ops of the current response.
  void traceBegin(const char* name, int64_t bytes = -1);
  void traceEnd(const char* name);

  // Scale applied after a reduction: postscale, and 1/size for average.
  // What the reduced values are multiplied by: postscale, over the set's
  // size for an average.
  double scaleFactor(const Response& r) const;
  void finishReduction(void* buf, size_t count, const Response& r);

  const Identity& identity_;
  std::unique_ptr<comm::Collectives> collectives_;
  EngineStats& stats_;
  FusionBuffer fusion_;
  FusionBuffer scratch_;
  Adasum adasum_;  // ReduceOp::kAdasum responses
  GpuPath gpu_;    // DeviceKind::kCuda responses
  timeline::Timeline* timeline_ = nullptr;
  std::vector<int> rows_;                   // traced rows of the current response
  const char* collectiveSpan_ = nullptr;    // "GLOO_ALLREDUCE" when rows_ is not empty
  std::array<const char*, 8> spanNames_{};  // per OpType, owned by timeline_
  std::array<const char*, 8> gpuSpanNames_{};  // the same for CUDA responses
};

// Fills buf with the identity element of op (0 for sum, 1 for product, the
// largest value for min, the lowest for max): what a joined rank contributes.
void fillNeutral(void* buf, size_t count, DataType dtype, ReduceOp op);

}  // namespace kolo
