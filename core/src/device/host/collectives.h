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
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/backend_args.h"
#include "comm/collectives.h"
#include "comm/cuda/device_set.h"
#include "device/host/host_runtime.h"

namespace kolo::device::host {

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

  explicit Clique(int size) : size_(size), parts_(static_cast<size_t>(size)) {}
  int size() const { return size_; }

  // One collective as member rank; writes `outBytes` of the result to
  // part.out. Fails (nothing written) when the clique was aborted or a
  // member did not arrive within timeout (then it aborts the clique).
  Status run(int rank, Part part, size_t outBytes, const Compute& compute,
             std::chrono::milliseconds timeout);
  // Every running and later run() fails with why.
  void abort(const std::string& why);

 private:
  enum class Phase { kCollect, kCompute, kWrite };
  bool waitFor(std::unique_lock<std::mutex>& lock, Phase phase,
               std::chrono::steady_clock::time_point deadline);

  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  Phase phase_ = Phase::kCollect;  // guarded by mu_
  int count_ = 0;                  // guarded by mu_: members done with the phase
  std::vector<Part> parts_;        // guarded by mu_
  std::string aborted_;            // guarded by mu_
};

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

}  // namespace kolo::device::host
