#include "comm/cuda/staged_collectives.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "kolo/error.h"

namespace kolo::comm::cuda {
namespace {

size_t sum(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t(0));
}

char* offset(void* base, size_t bytes) { return static_cast<char*>(base) + bytes; }

}  // namespace

StagedCollectives::StagedCollectives(std::unique_ptr<comm::Collectives> host,
                                     std::shared_ptr<DeviceSet> devices, int rank, int size,
                                     bool deviceDirect)
    : host_(std::move(host)),
      devices_(std::move(devices)),
      rank_(rank),
      size_(size),
      deviceDirect_(deviceDirect) {
  KOLO_CHECK_ARG(size >= 1 && rank >= 0 && rank < size,
                 "staged collectives: bad identity rank " + std::to_string(rank) + " of size " +
                     std::to_string(size));
  KOLO_CHECK_ARG(host_ != nullptr && devices_ != nullptr, "staged collectives: missing backend");
  name_ = std::string(host_->name()) + (deviceDirect_ ? "" : "+staging");
}

DeviceContext* StagedCollectives::stageFor(bool reduces, DataType dtype, const void* a,
                                           const void* b) {
  if (aborted_.load(std::memory_order_acquire)) {
    throw PeerFailure(name_ + ": aborted after an earlier failure");
  }
  DeviceContext* ctx = contextOf(a, b);
  if (ctx == nullptr || !deviceDirect_) return ctx;
  const bool hostReduction =
      reduces && (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16);
  if (!hostReduction) {
    // MPI reads the device buffers: what is queued on the comm stream
    // (packing kernels) must have finished first.
    ctx->synchronize();
    return nullptr;
  }
  return ctx;
}

DeviceContext* StagedCollectives::contextOf(const void* a, const void* b) {
  int device = -1;
  for (const void* p : {a, b}) {
    const int d = devices_->runtime().deviceOf(p);
    if (d < 0) continue;
    KOLO_CHECK_ARG(device < 0 || d == device, std::string(name()) + ": buffers on devices " +
                                                  std::to_string(device) + " and " +
                                                  std::to_string(d));
    device = d;
  }
  return device < 0 ? nullptr : &devices_->at(device);
}

void StagedCollectives::toHost(DeviceContext& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  ctx.copyAsync(dst, src, bytes, device::CopyKind::kDeviceToHost);
  // The host backend reads the staging copy next.
  ctx.synchronize();
}

void StagedCollectives::toDevice(DeviceContext& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  ctx.copyAsync(dst, src, bytes, device::CopyKind::kHostToDevice);
  // The staging buffer is reused by the next call.
  ctx.synchronize();
}

void StagedCollectives::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  DeviceContext* ctx = stageFor(true, dtype, buf);
  if (ctx == nullptr) return host_->allreduce(buf, count, dtype, op);
  const size_t bytes = count * elementSize(dtype);
  void* stage = ctx->staging(bytes);
  toHost(*ctx, stage, buf, bytes);
  host_->allreduce(stage, count, dtype, op);
  toDevice(*ctx, buf, stage, bytes);
}

void StagedCollectives::allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                                   DataType dtype) {
  DeviceContext* ctx = stageFor(false, dtype, in, out);
  if (ctx == nullptr) return host_->allgatherv(in, out, counts, dtype);
  checkCounts(counts, "allgatherv");
  const size_t es = elementSize(dtype);
  const size_t total = sum(counts) * es;
  const size_t mine = counts[rank_] * es;
  // Separate input and output regions: a host backend need not accept an
  // input aliasing its own block of the output.
  char* stage = static_cast<char*>(ctx->staging(total + mine));
  char* stageIn = offset(stage, total);
  toHost(*ctx, stageIn, in, mine);
  host_->allgatherv(stageIn, stage, counts, dtype);
  toDevice(*ctx, out, stage, total);
}

void StagedCollectives::broadcast(void* buf, size_t count, DataType dtype, int root) {
  DeviceContext* ctx = stageFor(false, dtype, buf);
  if (ctx == nullptr) return host_->broadcast(buf, count, dtype, root);
  const size_t bytes = count * elementSize(dtype);
  void* stage = ctx->staging(bytes);
  // Non-roots' contents are overwritten; copying them anyway keeps this
  // independent of the rank (the host backend knows it, we do not).
  toHost(*ctx, stage, buf, bytes);
  host_->broadcast(stage, count, dtype, root);
  toDevice(*ctx, buf, stage, bytes);
}

void StagedCollectives::alltoallv(const void* in, const std::vector<size_t>& sendCounts,
                                  void* out, const std::vector<size_t>& recvCounts,
                                  DataType dtype) {
  DeviceContext* ctx = stageFor(false, dtype, in, out);
  if (ctx == nullptr) return host_->alltoallv(in, sendCounts, out, recvCounts, dtype);
  const size_t es = elementSize(dtype);
  const size_t sendBytes = sum(sendCounts) * es;
  const size_t recvBytes = sum(recvCounts) * es;
  char* stage = static_cast<char*>(ctx->staging(sendBytes + recvBytes));
  toHost(*ctx, stage, in, sendBytes);
  host_->alltoallv(stage, sendCounts, offset(stage, sendBytes), recvCounts, dtype);
  toDevice(*ctx, out, offset(stage, sendBytes), recvBytes);
}

void StagedCollectives::reducescatter(const void* in, void* out,
                                      const std::vector<size_t>& recvCounts, DataType dtype,
                                      ReduceOp op) {
  DeviceContext* ctx = stageFor(true, dtype, in, out);
  if (ctx == nullptr) return host_->reducescatter(in, out, recvCounts, dtype, op);
  checkCounts(recvCounts, "reducescatter");
  const size_t es = elementSize(dtype);
  const size_t inBytes = sum(recvCounts) * es;
  const size_t outBytes = recvCounts[rank_] * es;
  char* stage = static_cast<char*>(ctx->staging(inBytes + outBytes));
  toHost(*ctx, stage, in, inBytes);
  host_->reducescatter(stage, offset(stage, inBytes), recvCounts, dtype, op);
  toDevice(*ctx, out, offset(stage, inBytes), outBytes);
}

void StagedCollectives::checkCounts(const std::vector<size_t>& counts, const char* what) const {
  KOLO_CHECK_ARG(counts.size() == static_cast<size_t>(size_),
                 name_ + " " + what + ": " + std::to_string(counts.size()) +
                     " counts for size " + std::to_string(size_));
}

}  // namespace kolo::comm::cuda
