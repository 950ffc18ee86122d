#include "comm/cuda/device_set.h"

#include <cstring>
#include <string>

#include "comm/cuda/batched_copy.h"
#include "comm/cuda/check.h"
#include "kolo/error.h"

namespace kolo::comm::cuda {

DeviceContext::DeviceContext(int device)
    : device_(device),
      fusion_(device),
      scratch_(device),
      deviceDescs_(device),
      doneEvents_(EventPool::create(device, cudaEventDisableTiming)),
      timingEvents_(EventPool::create(device, cudaEventDefault)) {
  KOLO_CHECK_ARG(device >= 0, "CUDA device index " + std::to_string(device) + " is negative");
  DeviceGuard guard(device);
  int least = 0, greatest = 0;
  KOLO_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  KOLO_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
  for (DescSlot& slot : descSlots_) {
    KOLO_CUDA_CHECK(cudaEventCreateWithFlags(&slot.uploaded, cudaEventDisableTiming));
  }
}

DeviceContext::~DeviceContext() {
  DeviceGuard guard(device_);
  (void)cudaStreamSynchronize(stream_);
  for (DescSlot& slot : descSlots_) (void)cudaEventDestroy(slot.uploaded);
  (void)cudaStreamDestroy(stream_);
}

void DeviceContext::batchedCopy(const std::vector<CopyDesc>& copies, DataType dtype,
                                const CopyTransform& transform) {
  const CopyPlan plan = planCopies(copies, elementSize(dtype));
  if (plan.chunks == 0) return;
  DeviceGuard guard(device_);
  // The device buffer is safe to overwrite: the upload below is ordered
  // after the previous kernel on the same stream.
  const size_t bytes = plan.descs.size() * sizeof(DeviceCopyDesc);
  if (bytes > deviceDescs_.capacity()) KOLO_CUDA_CHECK(cudaStreamSynchronize(stream_));  // rare
  DescSlot& slot = descSlots_[nextDescSlot_];
  nextDescSlot_ = (nextDescSlot_ + 1) % kDescSlots;
  // Only when kDescSlots launches are queued does the host wait, for the
  // oldest upload (not for the kernels).
  if (slot.inFlight) KOLO_CUDA_CHECK(cudaEventSynchronize(slot.uploaded));
  void* host = slot.host.data(bytes);
  void* dev = deviceDescs_.data(bytes);
  std::memcpy(host, plan.descs.data(), bytes);
  KOLO_CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream_));
  KOLO_CUDA_CHECK(cudaEventRecord(slot.uploaded, stream_));
  slot.inFlight = true;
  launchBatchedCopy(static_cast<const DeviceCopyDesc*>(dev),
                    static_cast<uint32_t>(plan.descs.size()), plan.chunks, plan.chunkElements,
                    dtype, transform, stream_);
}

void DeviceContext::copy(const void* src, void* dst, uint64_t count, DataType dtype,
                         const CopyTransform& transform) {
  if (count == 0) return;
  if (transform.kind != CopyTransform::Kind::kCopy || src == nullptr) {
    batchedCopy({CopyDesc{src, dst, count}}, dtype, transform);
    return;
  }
  if (src == dst) return;
  DeviceGuard guard(device_);
  KOLO_CUDA_CHECK(cudaMemcpyAsync(dst, src, count * elementSize(dtype), cudaMemcpyDeviceToDevice,
                                  stream_));
}

void DeviceContext::waitEvent(cudaEvent_t event) {
  KOLO_CUDA_CHECK(cudaStreamWaitEvent(stream_, event, 0));
}

std::shared_ptr<void> DeviceContext::record(bool timing) {
  DeviceGuard guard(device_);
  std::shared_ptr<void> event = (timing ? timingEvents_ : doneEvents_)->take();
  KOLO_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event.get()), stream_));
  return event;
}

void DeviceContext::launchHostFunc(void (*fn)(void*), void* arg) {
  DeviceGuard guard(device_);
  KOLO_CUDA_CHECK(cudaLaunchHostFunc(stream_, fn, arg));
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
