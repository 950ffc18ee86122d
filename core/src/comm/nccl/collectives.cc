#include "comm/nccl/collectives.h"

#include <string>
#include <utility>

#include "device/cuda/check.h"
#include "device/cuda/memory.h"
#include "comm/nccl/layout.h"
#include "comm/nccl/types.h"
#include "kolo/error.h"

namespace kolo::comm::nccl {
namespace {

// Key of the NCCL unique id in the backend's (already prefixed) store.
constexpr const char* kUniqueIdKey = "nccl/unique-id";

char* at(void* base, size_t elements, size_t elementBytes) {
  return static_cast<char*>(base) + elements * elementBytes;
}
const char* at(const void* base, size_t elements, size_t elementBytes) {
  return static_cast<const char*>(base) + elements * elementBytes;
}

// Issues calls between ncclGroupStart and ncclGroupEnd; the first error of
// the calls wins over the group's own result. The group is always closed.
template <typename Fn>
ncclResult_t grouped(Fn&& calls) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  const ncclResult_t inner = calls();
  const ncclResult_t end = ncclGroupEnd();
  return inner != ncclSuccess ? inner : end;
}

// Keeps the first failure of a sequence of calls.
struct FirstError {
  ncclResult_t result = ncclSuccess;
  void operator()(ncclResult_t r) {
    if (result == ncclSuccess && r != ncclSuccess && r != ncclInProgress) result = r;
  }
};

}  // namespace

Collectives::Collectives(const BackendArgs& args, std::shared_ptr<cuda::DeviceSet> devices)
    : timeout_(args.config.timeout),
      rank_(args.identity.rank),
      size_(args.identity.size),
      store_(args.store),
      broadcast_(args.broadcast),
      devices_(std::move(devices)) {
  KOLO_CHECK_ARG(size_ >= 1 && rank_ >= 0 && rank_ < size_,
                 "nccl: bad identity rank " + std::to_string(rank_) + " of size " +
                     std::to_string(size_));
  KOLO_CHECK_ARG(store_ != nullptr, "nccl: no rendezvous store");
  KOLO_CHECK_ARG(devices_ != nullptr, "nccl: no device set");
}

Communicator& Collectives::bind(const char* what, const void* a, const void* b) {
  // The buffers' device is checked when the communicator is made; after
  // that the GPU path keeps a rank's tensors on that device (gpu_path.cc),
  // so no driver call per collective.
  if (comm_) return *comm_;
  int device = -1;
  for (const void* p : {a, b}) {
    if (p == nullptr) continue;
    const int d = device::cuda::deviceOf(p);
    KOLO_CHECK_ARG(d >= 0, std::string("nccl ") + what +
                               ": buffer is host memory; NCCL needs CUDA device memory "
                               "(KOLO_GPU_OPERATIONS=nccl is for CUDA tensors)");
    KOLO_CHECK_ARG(device < 0 || d == device,
                   std::string("nccl ") + what + ": buffers on devices " +
                       std::to_string(device) + " and " + std::to_string(d));
    device = d;
  }
  if (!connectFailure_.empty()) {
    const std::string message = std::string("nccl ") + what +
                                " failed: backend unusable after an earlier failure: " +
                                connectFailure_;
    if (connectTimedOut_) throw Timeout(message);
    throw PeerFailure(message);
  }
  if (device < 0) KOLO_CUDA_CHECK(cudaGetDevice(&device));
  devices_->at(device);  // the comm stream exists before NCCL work is issued
  std::unique_ptr<Communicator> comm;
  try {
    comm = Communicator::connect(*store_, kUniqueIdKey, rank_, size_, device, timeout_,
                                 broadcast_);
  } catch (const Timeout& e) {
    connectFailure_ = e.what();
    connectTimedOut_ = true;
    throw;
  } catch (const PeerFailure& e) {
    connectFailure_ = e.what();
    throw;
  }
  std::lock_guard<std::mutex> lock(commMu_);
  comm_ = std::move(comm);
  return *comm_;
}

Status Collectives::asyncError() {
  std::lock_guard<std::mutex> lock(commMu_);
  return comm_ ? comm_->asyncError() : Status::Ok();
}

void Collectives::abortAsync() {
  std::lock_guard<std::mutex> lock(commMu_);
  if (comm_) comm_->abort();
}

void Collectives::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  const ncclDataType_t type = toNcclType(dtype);
  const ncclRedOp_t redop = toNcclOp(op, dtype);
  if (count == 0) return;
  Communicator& comm = bind("allreduce", buf);
  cudaStream_t s = stream();
  comm.run("allreduce", s, [&] {
    return ncclAllReduce(buf, buf, count, type, redop, comm.get(), s);
  });
}

void Collectives::allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                             DataType dtype) {
  checkCounts(counts, size_, "allgatherv");
  const ncclDataType_t type = toNcclType(dtype);
  const size_t es = elementSize(dtype);
  if (total(counts) == 0) return;
  Communicator& comm = bind("allgatherv", out, counts[rank_] > 0 ? in : nullptr);
  cudaStream_t s = stream();
  const std::vector<size_t> offsets = blockOffsets(counts);
  if (allEqual(counts)) {
    comm.run("allgatherv", s, [&] {
      return ncclAllGather(in, out, counts[0], type, comm.get(), s);
    });
    return;
  }
  // Uneven blocks: every rank broadcasts its own block into place.
  comm.run("allgatherv", s, [&] {
    return grouped([&] {
      FirstError first;
      for (int r = 0; r < size_; ++r) {
        if (counts[r] == 0) continue;
        void* dst = at(out, offsets[r], es);
        first(ncclBroadcast(r == rank_ ? in : dst, dst, counts[r], type, r, comm.get(), s));
      }
      return first.result;
    });
  });
}

void Collectives::broadcast(void* buf, size_t count, DataType dtype, int root) {
  checkRoot(root, size_, "broadcast");
  const ncclDataType_t type = toNcclType(dtype);
  if (count == 0) return;
  Communicator& comm = bind("broadcast", buf);
  cudaStream_t s = stream();
  comm.run("broadcast", s, [&] {
    return ncclBroadcast(buf, buf, count, type, root, comm.get(), s);
  });
}

void Collectives::alltoallv(const void* in, const std::vector<size_t>& sendCounts, void* out,
                            const std::vector<size_t>& recvCounts, DataType dtype) {
  checkAlltoall(sendCounts, recvCounts, rank_, size_);
  const ncclDataType_t type = toNcclType(dtype);
  const size_t es = elementSize(dtype);
  // No early return on empty totals: ranks differ in what they move, and a
  // rank's first call may have to join the communicator.
  Communicator& comm = bind("alltoallv", total(sendCounts) > 0 ? in : nullptr,
                            total(recvCounts) > 0 ? out : nullptr);
  cudaStream_t s = stream();
  const std::vector<size_t> sendOffsets = blockOffsets(sendCounts);
  const std::vector<size_t> recvOffsets = blockOffsets(recvCounts);
  comm.run("alltoallv", s, [&] {
    if (sendCounts[rank_] > 0) {
      // Own block: a device copy ordered on the comm stream, not a message.
      KOLO_CUDA_CHECK(cudaMemcpyAsync(at(out, recvOffsets[rank_], es),
                                      at(in, sendOffsets[rank_], es), sendCounts[rank_] * es,
                                      cudaMemcpyDeviceToDevice, s));
    }
    return grouped([&] {
      FirstError first;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        if (sendCounts[r] > 0) {
          first(ncclSend(at(in, sendOffsets[r], es), sendCounts[r], type, r, comm.get(), s));
        }
        if (recvCounts[r] > 0) {
          first(ncclRecv(at(out, recvOffsets[r], es), recvCounts[r], type, r, comm.get(), s));
        }
      }
      return first.result;
    });
  });
}

void Collectives::reducescatter(const void* in, void* out, const std::vector<size_t>& recvCounts,
                                DataType dtype, ReduceOp op) {
  checkCounts(recvCounts, size_, "reducescatter");
  const ncclDataType_t type = toNcclType(dtype);
  const ncclRedOp_t redop = toNcclOp(op, dtype);
  const size_t es = elementSize(dtype);
  if (total(recvCounts) == 0) return;
  Communicator& comm = bind("reducescatter", in, recvCounts[rank_] > 0 ? out : nullptr);
  cudaStream_t s = stream();
  if (allEqual(recvCounts)) {
    comm.run("reducescatter", s, [&] {
      return ncclReduceScatter(in, out, recvCounts[0], type, redop, comm.get(), s);
    });
    return;
  }
  // Uneven blocks: block r is reduced onto rank r.
  const std::vector<size_t> offsets = blockOffsets(recvCounts);
  // recvbuff is only written on the root; others pass any valid pointer.
  void* unused = out != nullptr ? out : const_cast<void*>(in);
  comm.run("reducescatter", s, [&] {
    return grouped([&] {
      FirstError first;
      for (int r = 0; r < size_; ++r) {
        if (recvCounts[r] == 0) continue;
        first(ncclReduce(at(in, offsets[r], es), r == rank_ ? out : unused, recvCounts[r], type,
                         redop, r, comm.get(), s));
      }
      return first.result;
    });
  });
}

}  // namespace kolo::comm::nccl
