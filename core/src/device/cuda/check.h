// CUDA runtime errors as kolo exceptions. A CUDA error inside kolo is
// either a bug or a broken device; it becomes kolo::Internal naming the
// call, CUDA's error name and text ("CUDA error in cudaMalloc(&p, bytes):
// cudaErrorMemoryAllocation: out of memory").
#pragma once

#include <string>

#include <cuda_runtime_api.h>

namespace kolo::device::cuda {

[[noreturn]] void throwCudaError(cudaError_t err, const char* expr);

// Human-readable text of a CUDA error: "cudaErrorNoDevice: no CUDA-capable
// device is detected".
std::string describe(cudaError_t err);

}  // namespace kolo::device::cuda

#define KOLO_CUDA_CHECK(expr)                                          \
  do {                                                                 \
    const cudaError_t kolo_cuda_err_ = (expr);                         \
    if (kolo_cuda_err_ != cudaSuccess) {                               \
      ::kolo::device::cuda::throwCudaError(kolo_cuda_err_, #expr);     \
    }                                                                  \
  } while (0)
