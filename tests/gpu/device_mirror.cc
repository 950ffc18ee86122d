#include "device_mirror.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "device/cuda/check.h"
#include "comm/cuda/device_set.h"
#include "comm/select.h"
#include "gpu_test_util.h"

namespace kolo::test {
namespace {

size_t sum(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t(0));
}

class DeviceMirror final : public comm::Collectives {
 public:
  explicit DeviceMirror(std::unique_ptr<comm::Collectives> inner) : inner_(std::move(inner)) {}

  const char* name() const override { return inner_->name(); }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override {
    DeviceBytes d(buf, count * elementSize(dtype));
    inner_->allreduce(count ? d.get() : nullptr, count, dtype, op);
    d.download(buf);
  }
  void allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                  DataType dtype) override {
    const size_t es = elementSize(dtype);
    DeviceBytes dIn(counts.at(rank) * es);
    DeviceBytes dOut(sum(counts) * es);
    uploadOwn(dIn, in, counts, es);
    inner_->allgatherv(counts[rank] ? dIn.get() : nullptr, sum(counts) ? dOut.get() : nullptr,
                       counts, dtype);
    dOut.download(out);
  }
  void broadcast(void* buf, size_t count, DataType dtype, int root) override {
    DeviceBytes d(buf, count * elementSize(dtype));
    inner_->broadcast(count ? d.get() : nullptr, count, dtype, root);
    d.download(buf);
  }
  void alltoallv(const void* in, const std::vector<size_t>& sendCounts, void* out,
                 const std::vector<size_t>& recvCounts, DataType dtype) override {
    const size_t es = elementSize(dtype);
    DeviceBytes dIn(in, sum(sendCounts) * es);
    DeviceBytes dOut(sum(recvCounts) * es);
    inner_->alltoallv(sum(sendCounts) ? dIn.get() : nullptr, sendCounts,
                      sum(recvCounts) ? dOut.get() : nullptr, recvCounts, dtype);
    dOut.download(out);
  }
  void reducescatter(const void* in, void* out, const std::vector<size_t>& recvCounts,
                     DataType dtype, ReduceOp op) override {
    const size_t es = elementSize(dtype);
    DeviceBytes dIn(in, sum(recvCounts) * es);
    size_t maxBlock = 0;
    for (size_t c : recvCounts) maxBlock = std::max(maxBlock, c);
    DeviceBytes dOut(maxBlock * es);
    inner_->reducescatter(sum(recvCounts) ? dIn.get() : nullptr, dOut.get(), recvCounts, dtype,
                          op);
    ownOut(dOut, out, recvCounts, es);
  }

  // The suite's rank is the backend's: set by the factory.
  int rank = 0;

 private:
  void uploadOwn(DeviceBytes& d, const void* in, const std::vector<size_t>& counts, size_t es) {
    const size_t bytes = counts.at(rank) * es;
    if (in == nullptr || bytes == 0) return;
    KOLO_CUDA_CHECK(cudaMemcpy(d.get(), in, bytes, cudaMemcpyHostToDevice));
  }
  void ownOut(DeviceBytes& d, void* out, const std::vector<size_t>& counts, size_t es) {
    const size_t bytes = counts.at(rank) * es;
    if (out == nullptr || bytes == 0) return;
    KOLO_CUDA_CHECK(cudaDeviceSynchronize());
    KOLO_CUDA_CHECK(cudaMemcpy(out, d.get(), bytes, cudaMemcpyDeviceToHost));
  }

  std::unique_ptr<comm::Collectives> inner_;
};

}  // namespace

std::unique_ptr<comm::Collectives> mirrorOnDevice(std::unique_ptr<comm::Collectives> inner) {
  return std::make_unique<DeviceMirror>(std::move(inner));
}

std::unique_ptr<comm::Collectives> createMirroredGpuCollectives(const char* backend,
                                                                const comm::BackendArgs& args) {
  auto mirror = std::make_unique<DeviceMirror>(comm::createGpuCollectives(
      backend, args, std::make_shared<comm::cuda::DeviceSet>()));
  mirror->rank = args.identity.rank;
  return mirror;
}

}  // namespace kolo::test
