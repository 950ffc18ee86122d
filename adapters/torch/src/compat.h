// LibTorch version differences, in one place. Supported: Debian's LibTorch
// 1.13 (CPU) and pip LibTorch 2.x (CPU or CUDA).
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kolo/engine.h"
#include "kolo/error.h"

#ifndef KOLO_TORCH_WITH_CUDA
#define KOLO_TORCH_WITH_CUDA 0  // set by adapters/torch/CMakeLists.txt
#endif
#if KOLO_TORCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
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

// A CUDA event recorded on the current stream of tensor's device (the
// stream that produced it: in a gradient hook, autograd's stream for that
// device), as the void* cudaEvent_t Entry::readyEvent takes. The engine's
// comm stream waits on it; no host thread blocks. nullptr for CPU tensors.
// The event lives as long as the returned pointer.
inline std::shared_ptr<void> recordReady(const at::Tensor& tensor) {
#if KOLO_TORCH_WITH_CUDA
  if (tensor.is_cuda()) {
    auto event = std::make_shared<at::cuda::CUDAEvent>(cudaEventDisableTiming);
    event->record(c10::cuda::getCurrentCUDAStream(tensor.get_device()));
    return std::shared_ptr<void>(event, static_cast<void*>(event->event()));
  }
#else
  (void)tensor;
#endif
  return nullptr;
}

// recordReady for a producer that submits one tensor at a time and waits
// for each submission to be enqueued before the next (a DistributedOptimizer
// gradient slot): one event, re-recorded, instead of creating and
// destroying a CUDA event per gradient per step. Re-recording is safe once
// the engine has enqueued the previous operation: its comm stream waited on
// the event then. record() returns the cudaEvent_t, nullptr for CPU tensors.
class ReadyEvent {
 public:
  void* record(const at::Tensor& tensor) {
#if KOLO_TORCH_WITH_CUDA
    if (tensor.is_cuda()) {
      if (!event_ || event_->device_index() != tensor.get_device()) {
        event_ = std::make_unique<at::cuda::CUDAEvent>(cudaEventDisableTiming);
      }
      event_->record(c10::cuda::getCurrentCUDAStream(tensor.get_device()));
      return static_cast<void*>(event_->event());
    }
#else
    (void)tensor;
#endif
    return nullptr;
  }

 private:
#if KOLO_TORCH_WITH_CUDA
  std::unique_ptr<at::cuda::CUDAEvent> event_;
#endif
};

// at::empty(shape, options), for a CUDA tensor under stream (a cudaStream_t
// from kolo::outputAllocationStream(); nullptr: the current stream), so the
// caching allocator ties the memory to the stream that writes it.
inline at::Tensor emptyOnStream(const std::vector<int64_t>& shape,
                                const at::TensorOptions& options, void* stream) {
#if KOLO_TORCH_WITH_CUDA
  if (stream != nullptr && options.device().is_cuda()) {
    c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromExternal(
        static_cast<cudaStream_t>(stream), options.device().index()));
    return at::empty(shape, options);
  }
#else
  (void)stream;
#endif
  return at::empty(shape, options);
}

// tensor (allocated on the engine's comm stream) is used on the caller's
// current stream from here on: its memory is not reused before that
// stream's work is done. No-op for CPU tensors.
inline void recordCurrentStream(const at::Tensor& tensor) {
#if KOLO_TORCH_WITH_CUDA
  if (tensor.defined() && tensor.is_cuda()) {
    tensor.record_stream(c10::cuda::getCurrentCUDAStream(tensor.get_device()).unwrap());
  }
#else
  (void)tensor;
#endif
}

// The first stage of a kolo operation on tensors of device: once its work is
// enqueued (kolo::Handle::waitEnqueued), the caller's current stream of
// device waits for that work's done event. The host blocks only until the
// work is enqueued; a CPU operation is simply waited for. Throws the
// operation's error.
inline void waitOnCurrentStream(const kolo::Handle& handle, const at::Device& device) {
  void* event = handle.waitEnqueued();
#if KOLO_TORCH_WITH_CUDA
  if (event != nullptr && device.is_cuda()) {
    const cudaError_t err = cudaStreamWaitEvent(
        c10::cuda::getCurrentCUDAStream(device.index()).stream(), static_cast<cudaEvent_t>(event), 0);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      throw kolo::Internal(std::string("cudaStreamWaitEvent on kolo's done event: ") +
                           cudaGetErrorString(err));
    }
  }
#else
  (void)event;
  (void)device;
#endif
}

}  // namespace kolo::torch::compat
