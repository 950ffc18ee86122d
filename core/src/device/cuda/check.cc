#include "device/cuda/check.h"

#include "kolo/error.h"

namespace kolo::device::cuda {

std::string describe(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

void throwCudaError(cudaError_t err, const char* expr) {
  // Clears a non-sticky error so the next call does not report it again.
  (void)cudaGetLastError();
  throw Internal(std::string("CUDA error in ") + expr + ": " + describe(err));
}

}  // namespace kolo::device::cuda
