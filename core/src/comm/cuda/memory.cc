#include "comm/cuda/memory.h"

#include <algorithm>

#include "comm/cuda/check.h"

namespace kolo::comm::cuda {
namespace {

constexpr size_t kGrain = size_t(1) << 20;

}  // namespace

size_t grownCapacity(size_t capacity, size_t request) {
  if (request <= capacity) return capacity;
  const size_t wanted = std::max(request, capacity + capacity / 2);
  return (wanted + kGrain - 1) / kGrain * kGrain;
}

DeviceGuard::DeviceGuard(int device) {
  if (device < 0) return;
  KOLO_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ == device) {
    previous_ = -1;
    return;
  }
  KOLO_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) {
    DeviceGuard guard(device_);
    (void)cudaFree(data_);
  }
}

void* DeviceBuffer::data(size_t bytes) {
  if (bytes <= capacity_ && data_ != nullptr) return data_;
  const size_t next = grownCapacity(capacity_, std::max<size_t>(bytes, 1));
  DeviceGuard guard(device_);
  if (data_ != nullptr) {
    KOLO_CUDA_CHECK(cudaFree(data_));
    data_ = nullptr;
    capacity_ = 0;
  }
  KOLO_CUDA_CHECK(cudaMalloc(&data_, next));
  capacity_ = next;
  return data_;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) (void)cudaFreeHost(data_);
}

void* PinnedBuffer::data(size_t bytes) {
  if (bytes <= capacity_ && data_ != nullptr) return data_;
  const size_t next = grownCapacity(capacity_, std::max<size_t>(bytes, 1));
  if (data_ != nullptr) {
    KOLO_CUDA_CHECK(cudaFreeHost(data_));
    data_ = nullptr;
    capacity_ = 0;
  }
  KOLO_CUDA_CHECK(cudaHostAlloc(&data_, next, cudaHostAllocPortable));
  capacity_ = next;
  return data_;
}

std::shared_ptr<EventPool> EventPool::create(int device, unsigned flags) {
  return std::shared_ptr<EventPool>(new EventPool(device, flags));
}

EventPool::~EventPool() {
  DeviceGuard guard(device_);
  for (cudaEvent_t e : free_) (void)cudaEventDestroy(e);
}

std::shared_ptr<void> EventPool::take() {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      event = free_.back();
      free_.pop_back();
    }
  }
  if (event == nullptr) {
    DeviceGuard guard(device_);
    KOLO_CUDA_CHECK(cudaEventCreateWithFlags(&event, flags_));
  }
  return std::shared_ptr<void>(static_cast<void*>(event),
                               [pool = shared_from_this()](void* e) {
                                 pool->give(static_cast<cudaEvent_t>(e));
                               });
}

void EventPool::give(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(event);
}

int deviceOf(const void* ptr) {
  if (ptr == nullptr) return -1;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    // No driver or device (then no device memory can exist), or memory CUDA
    // does not know: host memory either way.
    (void)cudaGetLastError();
    return -1;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? attr.device
                                                                                  : -1;
}

int deviceCount(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (why != nullptr) *why = describe(err);
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "cudaGetDeviceCount returned 0";
  return n;
}

}  // namespace kolo::comm::cuda
