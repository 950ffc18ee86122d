#include "device/cuda/memory.h"

#include <cuda_runtime_api.h>

#include "device/cuda/check.h"

namespace kolo::device::cuda {

void useDevice(int device) {
  if (device < 0) return;
  int current = -1;
  KOLO_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) KOLO_CUDA_CHECK(cudaSetDevice(device));
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

}  // namespace kolo::device::cuda
