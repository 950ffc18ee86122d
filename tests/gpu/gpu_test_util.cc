#include "gpu_test_util.h"

#include <cuda_runtime_api.h>

#include "device/cuda/check.h"

namespace kolo::test {

std::string noGpuReason() {
  std::string why;
  return device::cuda::deviceCount(&why) > 0 ? std::string() : why;
}

DeviceBytes::DeviceBytes(size_t bytes) : bytes_(bytes) {
  KOLO_CUDA_CHECK(cudaMalloc(&ptr_, bytes > 0 ? bytes : 1));
  KOLO_CUDA_CHECK(cudaMemset(ptr_, 0, bytes > 0 ? bytes : 1));
}

DeviceBytes::DeviceBytes(const void* host, size_t bytes) : DeviceBytes(bytes) {
  if (bytes > 0) KOLO_CUDA_CHECK(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
}

DeviceBytes::~DeviceBytes() { (void)cudaFree(ptr_); }

std::vector<char> DeviceBytes::download() const {
  std::vector<char> out(bytes_);
  download(out.data());
  return out;
}

void DeviceBytes::download(void* host) const {
  KOLO_CUDA_CHECK(cudaDeviceSynchronize());
  if (bytes_ > 0) KOLO_CUDA_CHECK(cudaMemcpy(host, ptr_, bytes_, cudaMemcpyDeviceToHost));
}

}  // namespace kolo::test
