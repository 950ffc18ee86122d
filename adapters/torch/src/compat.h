// LibTorch version differences, in one place. Supported: Debian's LibTorch
// 1.13 (CPU) and pip LibTorch 2.x (CPU or CUDA).
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#ifndef KOLO_TORCH_WITH_CUDA
#define KOLO_TORCH_WITH_CUDA 0  // set by adapters/torch/CMakeLists.txt
#endif
#if KOLO_TORCH_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#define KOLO_TORCH_VERSION_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||               \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace kolo::torch::compat {

// Optimizer::zero_grad(): 1.13 zeroes gradients in place and takes no
// argument; 2.x takes set_to_none (default true).
inline void zeroGrad(::torch::optim::Optimizer& optimizer, bool setToNone) {
#if KOLO_TORCH_VERSION_AT_LEAST(2, 0)
  optimizer.zero_grad(setToNone);
#else
  if (!setToNone) {
    optimizer.zero_grad();
    return;
  }
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) p.mutable_grad().reset();
  }
#endif
}

// The wrapped optimizer's default zero_grad() (zeros in 1.13, None in 2.x).
inline void zeroGrad(::torch::optim::Optimizer& optimizer) { optimizer.zero_grad(); }

// Key of a parameter in Optimizer::state(): the address of its TensorImpl,
// printed as a string in 1.13 and early 2.x, the pointer itself later.
using StateKey =
    std::decay_t<decltype(std::declval<::torch::optim::Optimizer&>().state())>::key_type;

namespace detail {
inline std::string makeStateKey(const at::Tensor& param, std::string*) {
  std::ostringstream os;
  os << param.unsafeGetTensorImpl();
  return os.str();
}
inline void* makeStateKey(const at::Tensor& param, void**) {
  return param.unsafeGetTensorImpl();
}
}  // namespace detail

inline StateKey stateKey(const at::Tensor& param) {
  return detail::makeStateKey(param, static_cast<StateKey*>(nullptr));
}

// Makes the work queued on tensor's current CUDA stream visible to the
// engine's threads before its memory is read. No-op for CPU tensors.
inline void waitUntilReady(const at::Tensor& tensor) {
#if KOLO_TORCH_WITH_CUDA
  if (tensor.is_cuda()) {
    c10::cuda::getCurrentCUDAStream(tensor.get_device()).synchronize();
  }
#else
  (void)tensor;
#endif
}

}  // namespace kolo::torch::compat
