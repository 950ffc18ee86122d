// Device collectives of the host runtime: what NCCL is to CUDA. A call
// enqueues the collective on the device's comm stream (the engine's
// DeviceSet, shared with the GPU executor) and returns; the members meet
// in a Clique of the HostRuntime when their streams get there. A failure
// (a peer aborted, a timeout, an injected fault) is this communicator's
// asynchronous error, as ncclCommGetAsyncError reports NCCL's; abortAsync
// ends the collectives queued and running on every member, as
// ncclCommAbort makes NCCL's kernels exit.
//
// Threading: as comm::Collectives (the loop thread, every rank in the same
// order); asyncError and abortAsync from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/backend_args.h"
#include "comm/collectives.h"
#include "comm/cuda/device_set.h"
#include "device/host/clique.h"
#include "device/host/host_runtime.h"

namespace kolo::comm::host {

using device::host::Clique;
using device::host::HostRuntime;

class Collectives final : public comm::Collectives {
 public:
  Collectives(const comm::BackendArgs& args, std::shared_ptr<comm::cuda::DeviceSet> devices,
              std::shared_ptr<HostRuntime> runtime);

  const char* name() const override { return "host"; }
  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                  DataType dtype) override;
  void broadcast(void* buf, size_t count, DataType dtype, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& sendCounts, void* out,
                 const std::vector<size_t>& recvCounts, DataType dtype) override;
  void reducescatter(const void* in, void* out, const std::vector<size_t>& recvCounts,
                     DataType dtype, ReduceOp op) override;
  Status asyncError() override;
  void abortAsync() override;
  // Peers' collectives fail with why (rank R's reason), as the engine's
  // stop would tell them.
  void abortWith(const Status& why) override;

 private:
  // Joins the clique (collective, on the first call) and queues the
  // collective on the comm stream of the buffers' device.
  void launch(const char* what, const void* a, const void* b, Clique::Part part, size_t outBytes,
              Clique::Compute compute);
  void connect();

  const std::chrono::milliseconds timeout_;
  const int rank_;
  const int size_;
  std::shared_ptr<Store> store_;
  std::function<void(std::vector<char>&, int)> broadcast_;
  std::shared_ptr<comm::cuda::DeviceSet> devices_;
  std::shared_ptr<HostRuntime> runtime_;
  std::shared_ptr<Clique> clique_;  // written on the loop thread under state_->mu
  int device_ = -1;
  // The first failure: shared with the queued collectives, which may run
  // after this object is gone.
  struct State {
    std::mutex mu;
    Status failure;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace kolo::comm::host
