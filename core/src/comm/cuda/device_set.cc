#include "comm/cuda/device_set.h"

#include <cstring>
#include <string>

#include "comm/cuda/batched_copy.h"
#include "comm/cuda/check.h"
#include "kolo/error.h"

namespace kolo::comm::cuda {

DeviceContext::DeviceContext(int device)
    : device_(device), fusion_(device), scratch_(device), deviceDescs_(device) {
  KOLO_CHECK_ARG(device >= 0, "CUDA device index " + std::to_string(device) + " is negative");
  DeviceGuard guard(device);
  int least = 0, greatest = 0;
  KOLO_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  KOLO_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
  KOLO_CUDA_CHECK(cudaEventCreateWithFlags(&descsUploaded_, cudaEventDisableTiming));
  KOLO_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

DeviceContext::~DeviceContext() {
  DeviceGuard guard(device_);
  (void)cudaStreamSynchronize(stream_);
  (void)cudaEventDestroy(done_);
  (void)cudaEventDestroy(descsUploaded_);
  (void)cudaStreamDestroy(stream_);
}

void DeviceContext::batchedCopy(const std::vector<CopyDesc>& copies, DataType dtype,
                                const CopyTransform& transform) {
  const CopyPlan plan = planCopies(copies, elementSize(dtype));
  if (plan.chunks == 0) return;
  DeviceGuard guard(device_);
  // The previous launch's descriptors may still be on their way from the
  // host buffer; the device buffer is safe to overwrite because the upload
  // below is ordered after the previous kernel on the same stream.
  if (descsInFlight_) KOLO_CUDA_CHECK(cudaEventSynchronize(descsUploaded_));
  const size_t bytes = plan.descs.size() * sizeof(DeviceCopyDesc);
  if (bytes > deviceDescs_.capacity()) KOLO_CUDA_CHECK(cudaStreamSynchronize(stream_));
  void* host = hostDescs_.data(bytes);
  void* dev = deviceDescs_.data(bytes);
  std::memcpy(host, plan.descs.data(), bytes);
  KOLO_CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream_));
  KOLO_CUDA_CHECK(cudaEventRecord(descsUploaded_, stream_));
  descsInFlight_ = true;
  launchBatchedCopy(static_cast<const DeviceCopyDesc*>(dev),
                    static_cast<uint32_t>(plan.descs.size()), plan.chunks, plan.chunkElements,
                    dtype, transform, stream_);
}

void DeviceContext::waitEvent(cudaEvent_t event) {
  KOLO_CUDA_CHECK(cudaStreamWaitEvent(stream_, event, 0));
}

cudaEvent_t DeviceContext::recordDone() {
  DeviceGuard guard(device_);
  KOLO_CUDA_CHECK(cudaEventRecord(done_, stream_));
  return done_;
}

void DeviceContext::synchronize() {
  DeviceGuard guard(device_);
  KOLO_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

DeviceContext& DeviceSet::at(int device) {
  auto it = contexts_.find(device);
  if (it == contexts_.end()) {
    it = contexts_.emplace(device, std::make_unique<DeviceContext>(device)).first;
  }
  return *it->second;
}

}  // namespace kolo::comm::cuda
