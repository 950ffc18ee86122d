// The GPU data plane over NCCL. Buffers are device pointers on one device
// (kolo drives one GPU per rank; NCCL refuses two ranks on one GPU). Every
// call enqueues its NCCL work on that device's comm stream (the
// cuda::DeviceSet shared with the GPU executor, so packing kernels enqueued
// before a call are ordered before it) and returns once the stream is idle.
//
// The communicator is created on the first call that has a device buffer
// (or on the current device when a rank's buffers are all empty): every
// rank makes its first GPU call for the same response, so this collective
// setup lines up across ranks.
//
// Beyond comm::Collectives: allreduce also accepts ReduceOp::kAverage for
// floating dtypes (ncclAvg); supportsAverage() says so.
//
// Threading: as comm::Collectives (one calling thread, same order on every
// rank). Errors: PeerFailure / Timeout from the communicator (aborted
// first), InvalidArgument for host pointers, pointers on another device and
// bad counts.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/backend_args.h"
#include "comm/collectives.h"
#include "comm/cuda/device_set.h"
#include "comm/nccl/communicator.h"

namespace kolo::comm::nccl {

class Collectives final : public comm::Collectives {
 public:
  Collectives(const BackendArgs& args, std::shared_ptr<cuda::DeviceSet> devices);

  const char* name() const override { return "nccl"; }
  static constexpr bool supportsAverage() { return true; }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                  DataType dtype) override;
  void broadcast(void* buf, size_t count, DataType dtype, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& sendCounts, void* out,
                 const std::vector<size_t>& recvCounts, DataType dtype) override;
  void reducescatter(const void* in, void* out, const std::vector<size_t>& recvCounts,
                     DataType dtype, ReduceOp op) override;

  // The communicator's device; -1 before the first call.
  int device() const { return comm_ ? comm_->device() : -1; }

  // Any thread (the completion watcher): the communicator's asynchronous
  // error, and aborting it.
  Status asyncError() override;
  void abortAsync() override;

 private:
  // The communicator for the device of the given buffers (nullptr ignored),
  // connected on first use. Throws InvalidArgument for host memory or a
  // second device.
  Communicator& bind(const char* what, const void* a, const void* b = nullptr);
  cudaStream_t stream() {
    return reinterpret_cast<cudaStream_t>(devices_->at(comm_->device()).stream());
  }

  const std::chrono::milliseconds timeout_;
  const int rank_;
  const int size_;
  std::shared_ptr<Store> store_;
  std::function<void(std::vector<char>&, int)> broadcast_;  // BackendArgs::broadcast
  std::shared_ptr<cuda::DeviceSet> devices_;
  std::mutex commMu_;  // guards comm_ against the watcher's calls
  std::unique_ptr<Communicator> comm_;
  // Set when connecting failed: later calls fail at once (peers have given
  // up on this communicator too).
  std::string connectFailure_;
  bool connectTimedOut_ = false;
};

}  // namespace kolo::comm::nccl
