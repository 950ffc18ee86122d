#include "comm/cuda/gpu_executor.h"

#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "comm/cuda/check.h"
#include "kolo/error.h"

namespace kolo::comm::cuda {
namespace {

char* at(void* base, uint64_t elements, size_t elementBytes) {
  return static_cast<char*>(base) + elements * elementBytes;
}

bool isCopy(const CopyTransform& t) { return t.kind == CopyTransform::Kind::kCopy; }

}  // namespace

GpuExecutor::GpuExecutor(std::shared_ptr<DeviceSet> devices,
                         std::unique_ptr<comm::Collectives> collectives, int rank, int size,
                         std::chrono::milliseconds timeout)
    : devices_(std::move(devices)),
      collectives_(std::move(collectives)),
      rank_(rank),
      size_(size),
      nativeAverage_(collectives_ != nullptr && std::strcmp(collectives_->name(), "nccl") == 0),
      timeout_(timeout) {
  KOLO_CHECK_ARG(devices_ != nullptr && collectives_ != nullptr, "gpu executor: missing backend");
  KOLO_CHECK_ARG(size >= 1 && rank >= 0 && rank < size,
                 "gpu executor: bad identity rank " + std::to_string(rank) + " of size " +
                     std::to_string(size));
}

void GpuExecutor::waitDone(int device) {
  DeviceContext& ctx = devices_->at(device);
  DeviceGuard guard(device);
  cudaEvent_t done = ctx.recordDone();
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (;;) {
    const cudaError_t err = cudaEventQuery(done);
    if (err == cudaSuccess) return;
    if (err != cudaErrorNotReady) {
      (void)cudaGetLastError();
      throw Internal("GPU work of a response failed on device " + std::to_string(device) + ": " +
                     describe(err));
    }
    const auto waited = Clock::now() - start;
    if (waited > timeout_) {
      throw Timeout("GPU work of a response did not finish on device " + std::to_string(device) +
                    " within KOLO_TIMEOUT (" + std::to_string(timeout_.count()) + " ms)");
    }
    // Spin briefly (the unpack kernel after a collective takes microseconds),
    // then sleep in short steps.
    if (waited < std::chrono::microseconds(200)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void GpuExecutor::waitReady(int device, cudaEvent_t event) {
  DeviceContext& ctx = devices_->at(device);
  DeviceGuard guard(device);
  ctx.waitEvent(event);
}

GpuExecutor::Finish GpuExecutor::finishFor(DataType dtype, ReduceOp op, double postscale) const {
  const bool floating = isFloatingPoint(dtype);
  if (op != ReduceOp::kAverage) return {op, makeTransform(dtype, postscale)};
  // Integer average: an exact truncating division, or with a postscale one
  // multiply by postscale / size in float64 (as the CPU executor does).
  if (!floating && postscale == 1.0) return {ReduceOp::kSum, makeTransform(dtype, 1.0, size_)};
  if (!floating) return {ReduceOp::kSum, makeTransform(dtype, postscale / size_)};
  if (nativeAverage_) return {ReduceOp::kAverage, makeTransform(dtype, postscale)};
  return {ReduceOp::kSum, makeTransform(dtype, postscale / size_)};
}

void GpuExecutor::allreduce(int device, const std::vector<DeviceTensor>& tensors, DataType dtype,
                            ReduceOp op, double prescale, double postscale) {
  DeviceContext& ctx = devices_->at(device);
  DeviceGuard guard(device);
  const size_t es = elementSize(dtype);
  const CopyTransform pre = makeTransform(dtype, prescale);
  const Finish finish = finishFor(dtype, op, postscale);
  uint64_t total = 0;
  for (const DeviceTensor& t : tensors) total += t.count;

  const bool inPlace = tensors.size() == 1 && tensors[0].input != nullptr;
  void* buf;
  if (inPlace) {
    const DeviceTensor& t = tensors[0];
    buf = t.output;
    if (t.count > 0 && (t.input != t.output || !isCopy(pre))) {
      ctx.batchedCopy({CopyDesc{t.input, t.output, t.count}}, dtype, pre);
    }
  } else {
    buf = ctx.fusion(total * es);
    std::vector<CopyDesc> pack;
    pack.reserve(tensors.size());
    uint64_t offset = 0;
    for (const DeviceTensor& t : tensors) {
      pack.push_back(CopyDesc{t.input, at(buf, offset, es), t.count});
      offset += t.count;
    }
    CopyTransform packTransform = pre;
    packTransform.fillBits = neutralBits(dtype, op);
    ctx.batchedCopy(pack, dtype, packTransform);
  }

  collectives_->allreduce(buf, total, dtype, finish.backendOp);

  if (inPlace) {
    if (!isCopy(finish.transform) && total > 0) {
      ctx.batchedCopy({CopyDesc{buf, buf, total}}, dtype, finish.transform);
    }
    return;
  }
  std::vector<CopyDesc> unpack;
  unpack.reserve(tensors.size());
  uint64_t offset = 0;
  for (const DeviceTensor& t : tensors) {
    if (t.input != nullptr) unpack.push_back(CopyDesc{at(buf, offset, es), t.output, t.count});
    offset += t.count;
  }
  ctx.batchedCopy(unpack, dtype, finish.transform);
}

void GpuExecutor::broadcast(int device, const DeviceTensor& tensor, DataType dtype, int root) {
  DeviceContext& ctx = devices_->at(device);
  DeviceGuard guard(device);
  const size_t es = elementSize(dtype);
  void* buf = tensor.output;
  if (buf == nullptr) buf = ctx.scratch(tensor.count * es);  // a joined rank
  if (rank_ == root && tensor.input != nullptr && tensor.input != buf && tensor.count > 0) {
    ctx.batchedCopy({CopyDesc{tensor.input, buf, tensor.count}}, dtype, CopyTransform{});
  }
  collectives_->broadcast(buf, tensor.count, dtype, root);
}

void GpuExecutor::allgatherv(int device, const void* in, void* out,
                             const std::vector<size_t>& counts, DataType dtype) {
  DeviceContext& ctx = devices_->at(device);  // the comm stream exists before the backend uses it
  DeviceGuard guard(device);
  if (out == nullptr) {  // a joined rank: receives into scratch
    size_t total = 0;
    for (size_t c : counts) total += c;
    out = ctx.scratch(total * elementSize(dtype));
  }
  collectives_->allgatherv(in, out, counts, dtype);
}

void GpuExecutor::alltoallv(int device, const void* in, const std::vector<size_t>& sendCounts,
                            void* out, const std::vector<size_t>& recvCounts, DataType dtype) {
  DeviceContext& ctx = devices_->at(device);
  DeviceGuard guard(device);
  if (out == nullptr) {
    size_t total = 0;
    for (size_t c : recvCounts) total += c;
    out = ctx.scratch(total * elementSize(dtype));
  }
  collectives_->alltoallv(in, sendCounts, out, recvCounts, dtype);
}

void GpuExecutor::reducescatter(int device, const void* in, void* out,
                                const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                                double prescale, double postscale) {
  DeviceContext& ctx = devices_->at(device);
  DeviceGuard guard(device);
  const size_t es = elementSize(dtype);
  const CopyTransform pre = makeTransform(dtype, prescale);
  const Finish finish = finishFor(dtype, op, postscale);
  uint64_t total = 0;
  for (size_t c : counts) total += c;
  const uint64_t mine = counts.at(static_cast<size_t>(rank_));
  if (in == nullptr) {
    // A joined rank contributes the identity of op and drops its share.
    void* neutral = ctx.fusion(total * es);
    CopyTransform fill;
    fill.fillBits = neutralBits(dtype, op);
    if (total > 0) ctx.batchedCopy({CopyDesc{nullptr, neutral, total}}, dtype, fill);
    in = neutral;
    out = ctx.scratch(mine * es);
  } else if (!isCopy(pre) && total > 0) {
    void* scaled = ctx.scratch(total * es);
    ctx.batchedCopy({CopyDesc{in, scaled, total}}, dtype, pre);
    in = scaled;
  }
  collectives_->reducescatter(in, out, counts, dtype, finish.backendOp);
  if (!isCopy(finish.transform) && mine > 0) {
    ctx.batchedCopy({CopyDesc{out, out, mine}}, dtype, finish.transform);
  }
}

}  // namespace kolo::comm::cuda
