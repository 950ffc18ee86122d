// GPU tensors over a CPU data plane (KOLO_GPU_OPERATIONS=mpi|gloo): device
// buffers are copied into pinned host staging on the device's comm stream,
// the host backend runs on the staging copy, and the result is copied back.
// Several ranks may share one GPU this way (NCCL refuses that).
//
// Host pointers are passed straight through, so the same object also
// serves CPU tensors. With deviceDirect (a CUDA-aware MPI, see
// comm/gpu_route.h) device pointers go to the host backend as they are,
// except reductions of float16/bfloat16: MPI reduces those with kolo's
// user-defined operations, which run on the host, so they are staged.
//
// Threading: as comm::Collectives. Each call returns once the result is in
// the caller's buffer (the comm stream has been synchronised), so nothing
// of it is in flight between calls: abortAsync only makes later calls fail
// (GpuExecutor::abort then drains the comm streams for what is queued).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "comm/cuda/device_set.h"

namespace kolo::comm::cuda {

class StagedCollectives final : public comm::Collectives {
 public:
  // host: the CPU backend built for this rank (rank of size).
  StagedCollectives(std::unique_ptr<comm::Collectives> host, std::shared_ptr<DeviceSet> devices,
                    int rank, int size, bool deviceDirect = false);

  // "gloo+staging", "mpi+staging", "mpi" (deviceDirect).
  const char* name() const override { return name_.c_str(); }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                  DataType dtype) override;
  void broadcast(void* buf, size_t count, DataType dtype, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& sendCounts, void* out,
                 const std::vector<size_t>& recvCounts, DataType dtype) override;
  void reducescatter(const void* in, void* out, const std::vector<size_t>& recvCounts,
                     DataType dtype, ReduceOp op) override;

  comm::Collectives& host() { return *host_; }

  // Any thread: later calls throw PeerFailure.
  void abortAsync() override { aborted_.store(true, std::memory_order_release); }
  void abandon(const std::string& why) override { host_->abandon(why); }

 private:
  // The context of the device the non-null buffers live on; nullptr when
  // they are host memory or all null (then no staging is needed).
  DeviceContext* contextOf(const void* a, const void* b = nullptr);
  // The staging context for buffers a, b, or nullptr to pass them to the
  // host backend as they are (host memory, or deviceDirect and a call MPI
  // runs on the device).
  DeviceContext* stageFor(bool reduces, DataType dtype, const void* a, const void* b = nullptr);
  void toHost(DeviceContext& ctx, void* dst, const void* src, size_t bytes);
  void toDevice(DeviceContext& ctx, void* dst, const void* src, size_t bytes);
  void checkCounts(const std::vector<size_t>& counts, const char* what) const;

  std::unique_ptr<comm::Collectives> host_;
  std::shared_ptr<DeviceSet> devices_;
  const int rank_;
  const int size_;
  const bool deviceDirect_;
  std::string name_;
  std::atomic<bool> aborted_{false};
};

}  // namespace kolo::comm::cuda
