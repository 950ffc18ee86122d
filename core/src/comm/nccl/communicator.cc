#include "comm/nccl/communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "device/cuda/check.h"
#include "device/cuda/memory.h"
#include "comm/nccl/types.h"
#include "common/bounded_call.h"
#include "kolo/error.h"

namespace kolo::comm::nccl {
namespace {

using Clock = std::chrono::steady_clock;

std::string rankText(int rank, int size) {
  return "rank " + std::to_string(rank) + " of " + std::to_string(size);
}

}  // namespace

void backoff(Clock::duration waited) {
  using namespace std::chrono_literals;
  if (waited < 20us) return;
  if (waited < 1ms) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(waited < 100ms ? 20us : 100us);
}

std::unique_ptr<Communicator> Communicator::connect(
    Store& store, const std::string& key, int rank, int size, int device,
    std::chrono::milliseconds timeout,
    const std::function<void(std::vector<char>&, int)>& broadcast) {
  KOLO_CHECK_ARG(size >= 1 && rank >= 0 && rank < size,
                 "nccl: bad identity rank " + std::to_string(rank) + " of size " +
                     std::to_string(size));
  KOLO_CHECK_ARG(device >= 0, "nccl: no CUDA device for the communicator");
  KOLO_CHECK_ARG(timeout.count() > 0, "nccl: timeout must be positive");
  const std::string who = "nccl connect (" + rankText(rank, size) + ", device " +
                          std::to_string(device) + ", store key '" + key + "')";
  ncclUniqueId id;
  std::vector<char> bytes;
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) throw PeerFailure(who + " failed: ncclGetUniqueId: " + describe(r));
    bytes.assign(id.internal, id.internal + sizeof(id.internal));
  }
  if (broadcast) {
    broadcast(bytes, 0);
  } else if (rank == 0) {
    store.set(key, bytes);
  } else {
    try {
      bytes = store.get(key, timeout);
    } catch (const Timeout& e) {
      throw Timeout(who + " failed: rank 0 did not publish the NCCL id: " + e.what());
    }
  }
  KOLO_ENFORCE(bytes.size() == sizeof(id.internal),
               who + ": NCCL id of " + std::to_string(bytes.size()) + " bytes");
  std::memcpy(id.internal, bytes.data(), sizeof(id.internal));

  device::cuda::useDevice(device);  // the loop thread's device from now on (never restored)
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait below is ours, bounded and abortable
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm != nullptr) ncclCommAbort(comm);
    throw PeerFailure(who + " failed: ncclCommInitRankConfig: " + describe(r, comm));
  }
  std::unique_ptr<Communicator> result(new Communicator(comm, rank, size, device, timeout));
  std::unique_lock<std::mutex> lock(result->mu_);
  result->waitIssued("connect", Clock::now() + timeout, lock);
  lock.unlock();
  return result;
}

Communicator::Communicator(ncclComm_t comm, int rank, int size, int device,
                           std::chrono::milliseconds timeout)
    : comm_(comm), rank_(rank), size_(size), device_(device), timeout_(timeout) {}

Communicator::~Communicator() {
  if (comm_ == nullptr) return;
  // No device switch here: this may run on a thread of the user's (NCCL's
  // calls make the communicator's device current themselves).
  const auto deadline = Clock::now() + timeout_;
  ncclResult_t r = ncclCommFinalize(comm_);
  ncclResult_t state = r;
  const auto start = Clock::now();
  while (r == ncclSuccess || r == ncclInProgress) {
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || state != ncclInProgress) break;
    if (Clock::now() > deadline) break;
    backoff(Clock::now() - start);
  }
  if ((r == ncclSuccess || r == ncclInProgress) && state == ncclSuccess) {
    ncclCommDestroy(comm_);
  } else {
    abortBounded(comm_, device_, abortLimit());
  }
  comm_ = nullptr;
}

std::chrono::milliseconds Communicator::abortLimit() const {
  return std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(10));
}

bool abortBounded(ncclComm_t comm, int device, std::chrono::milliseconds limit) {
  // ncclCommAbort hangs in some NCCL versions (a proxy thread that never
  // exits): past limit it is left behind (reported; the process may still
  // exit) instead of hanging shutdown.
  const bool returned = callWithin(limit, [comm, device] {
    try {
      device::cuda::useDevice(device);
    } catch (const std::exception&) {
      // ncclCommAbort makes the device current itself.
    }
    ncclCommAbort(comm);
  });
  if (!returned) {
    std::fprintf(stderr,
                 "kolo: ncclCommAbort on cuda:%d did not return within %lld ms; leaving it "
                 "behind\n",
                 device, static_cast<long long>(limit.count()));
  }
  return returned;
}

void Communicator::abort() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  abortLocked();
}

void Communicator::abortLocked() noexcept {
  if (comm_ == nullptr) return;
  abortBounded(comm_, device_, abortLimit());
  comm_ = nullptr;
  if (!failed_) {
    failed_ = true;
    failure_ = "nccl communicator aborted";
  }
}

void Communicator::run(const char* what, cudaStream_t stream,
                       const std::function<ncclResult_t()>& issue) {
  (void)stream;  // issue() names it; the work stays on it
  std::unique_lock<std::mutex> lock(mu_);
  checkUsable(what);
  device::cuda::useDevice(device_);  // the loop thread works on this device
  const auto deadline = Clock::now() + timeout_;
  const ncclResult_t r = issue();
  if (r != ncclSuccess && r != ncclInProgress) fail(what, describe(r, comm_), false);
  waitIssued(what, deadline, lock);
}

Status Communicator::asyncError() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_ && comm_ != nullptr) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) {
      noteFailure("collective", "ncclCommGetAsyncError: " + describe(r, comm_), false);
    } else if (state != ncclSuccess && state != ncclInProgress) {
      noteFailure("collective", describe(state, comm_), false);
    }
  }
  if (!failed_) return Status::Ok();
  return Status{failedByTimeout_ ? ErrorCode::kTimeout : ErrorCode::kPeerFailure, failure_};
}

void Communicator::waitIssued(const char* what, Clock::time_point deadline,
                              std::unique_lock<std::mutex>& lock) {
  const auto start = Clock::now();
  for (;;) {
    if (failed_) {
      // While this thread backed off, another aborted the communicator
      // (comm_ is gone) or asyncError() noted a failure (then abort now,
      // as fail() does, so that kernels waiting for peers end).
      abortLocked();
      checkUsable(what);
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) fail(what, "ncclCommGetAsyncError: " + describe(r, comm_), false);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) fail(what, describe(state, comm_), false);
    if (Clock::now() > deadline) {
      fail(what, "no progress from a peer", true);
    }
    // Not held while backing off: a lazy connect may take until the
    // deadline, and meanwhile the completion watcher's asyncError() and an
    // abort() from the engine's failure path must get in (the abort ends
    // this wait at the next look instead of at the timeout).
    lock.unlock();
    backoff(Clock::now() - start);
    lock.lock();
  }
}

void Communicator::checkUsable(const char* what) const {
  if (!failed_) return;
  const std::string message = std::string("nccl ") + what +
                              " failed: backend unusable after an earlier failure: " + failure_;
  if (failedByTimeout_) throw Timeout(message);
  throw PeerFailure(message);
}

void Communicator::noteFailure(const char* what, const std::string& text, bool isTimeout) {
  failure_ = std::string("nccl ") + what + " failed (" + rankText(rank_, size_) + ", device " +
             std::to_string(device_) + "): " + text;
  failedByTimeout_ = isTimeout;
  failed_ = true;
}

void Communicator::fail(const char* what, const std::string& text, bool isTimeout) {
  noteFailure(what, text, isTimeout);
  // Abort so the kernels still waiting for a peer stop and the peers' own
  // communicators report the failure instead of hanging.
  abortLocked();
  if (isTimeout) {
    throw Timeout(failure_ + " (timeout " + std::to_string(timeout_.count()) + " ms)");
  }
  throw PeerFailure(failure_);
}

}  // namespace kolo::comm::nccl
