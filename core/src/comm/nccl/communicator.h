// Communicator: one non-blocking NCCL communicator on one device and kolo's
// error policy around it. Every wait is bounded: NCCL's asynchronous error
// is polled while waiting, and a communicator that fails or runs past the
// timeout is aborted (so its kernels stop and peers see the failure) before
// PeerFailure or Timeout is thrown.
//
// Threading: one thread drives a Communicator (the engine's background
// thread); every rank calls run() in the same order. asyncError() and
// abort() may come from any thread (the GPU path's completion watcher, the
// engine's failure path), also while run() waits for NCCL to take its work
// (a lazy connect may take until the timeout): an abort then ends that
// wait within a look.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "kolo/error.h"
#include "kolo/store.h"

namespace kolo::comm::nccl {

class Communicator {
 public:
  // Collective over all `size` ranks: rank 0 creates the NCCL unique id and
  // hands it to the others through broadcast when given (the control
  // plane), else by publishing it in store under key for them to read
  // (bounded by timeout). Then every rank joins the communicator on device.
  // Throws Timeout when a peer does not show up in time, PeerFailure when
  // NCCL fails, InvalidArgument for a bad rank/size/device.
  static std::unique_ptr<Communicator> connect(
      Store& store, const std::string& key, int rank, int size, int device,
      std::chrono::milliseconds timeout,
      const std::function<void(std::vector<char>&, int)>& broadcast = {});

  // Finalizes (flushes) and destroys the communicator, aborting it instead
  // when finalizing fails or takes longer than the timeout.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  ncclComm_t get() const { return comm_; }
  int device() const { return device_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Runs one collective named `what`: issue() makes the NCCL calls on stream
  // (a group when it is several) and returns the first non-success result.
  // Returns once NCCL has enqueued the work on stream, not when the work is
  // done (asyncError() reports how that goes). Errors:
  // PeerFailure("nccl allreduce failed: ...") or Timeout; after the first
  // failure every later run() throws at once.
  void run(const char* what, cudaStream_t stream, const std::function<ncclResult_t()>& issue);

  // NCCL's asynchronous error (a peer failed, a network error), as the
  // status of the work in flight: ok while there is none. Records it, so the
  // next run() throws it. Any thread; a host-side read, no CUDA call.
  Status asyncError();

  // Aborts now (e.g. the engine failed for another reason): kernels waiting
  // for peers end. Bounded (abortBounded). Idempotent. Any thread.
  void abort() noexcept;

 private:
  Communicator(ncclComm_t comm, int rank, int size, int device,
               std::chrono::milliseconds timeout);

  using Clock = std::chrono::steady_clock;
  // Until the communicator leaves ncclInProgress (a non-blocking call was
  // issued), the deadline passes or another thread aborts it. lock holds
  // mu_ on entry and return; it is released between looks.
  void waitIssued(const char* what, Clock::time_point deadline,
                  std::unique_lock<std::mutex>& lock);
  void checkUsable(const char* what) const;
  // Records the failure (mu_ held).
  void noteFailure(const char* what, const std::string& text, bool isTimeout);
  [[noreturn]] void fail(const char* what, const std::string& text, bool isTimeout);
  void abortLocked() noexcept;
  // How long an abort may take before it is left behind.
  std::chrono::milliseconds abortLimit() const;

  mutable std::mutex mu_;  // guards comm_ and the failure fields
  ncclComm_t comm_;
  const int rank_;
  const int size_;
  const int device_;
  const std::chrono::milliseconds timeout_;
  bool failed_ = false;
  bool failedByTimeout_ = false;
  std::string failure_;
};

// ncclCommAbort(comm) through callWithin (common/bounded_call.h): true
// when it returned within limit. Past limit it is left running (and
// reported on stderr), so a hanging abort cannot hang the engine's shutdown.
bool abortBounded(ncclComm_t comm, int device, std::chrono::milliseconds limit);

// Sleeps a little more the longer a wait lasts: spin first (latency of small
// collectives), then yield, then sleep up to 100 us.
void backoff(std::chrono::steady_clock::duration waited);

}  // namespace kolo::comm::nccl
