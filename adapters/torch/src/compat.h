// LibTorch version differences, in one place. Supported: Debian's LibTorch
// 1.13 (CPU) and pip LibTorch 2.x (CPU or CUDA).
#pragma once

#include <torch/torch.h>
#include <torch/version.h>
#include <c10/core/DeviceGuard.h>

#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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

// to[i].copy_(from[i]) for every i: one multi-tensor kernel per few dozen
// tensors on CUDA where LibTorch has _foreach_copy_ (2.1 on), instead of a
// cudaMemcpyAsync per tensor; per tensor otherwise (and on the CPU, where
// _foreach_copy_ does the same).
inline void copyAll(std::vector<at::Tensor>& to, const std::vector<at::Tensor>& from) {
  if (to.empty()) return;
#if KOLO_TORCH_VERSION_AT_LEAST(2, 1)
  at::_foreach_copy_(to, from);
#else
  for (size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i]);
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

#if KOLO_TORCH_WITH_CUDA
// Refuses to go on while `stream` is capturing a CUDA graph: kolo's comm
// stream would wait on an event recorded in the capture (or the capture on
// kolo's done event), which joins it to the capture, and the background
// thread's synchronizing calls then invalidate the capture. Throws
// InvalidArgument naming `what`.
inline void checkNotCapturing(cudaStream_t stream, const char* what) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(stream, &status);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw kolo::Internal(std::string("cudaStreamIsCapturing: ") + cudaGetErrorString(err));
  }
  if (status != cudaStreamCaptureStatusNone) {
    throw kolo::InvalidArgument(
        std::string("kolo: ") + what +
        " while the current CUDA stream is capturing a CUDA graph (torch.cuda.graph / "
        "CUDAGraph::capture_begin). kolo's collectives run on their own stream, driven by a "
        "background thread, and cannot be part of a graph: capturing them would invalidate "
        "the capture. Run kolo operations (allreduce, DistributedOptimizer backward hooks, "
        "synchronize/step) outside graph capture: capture only the part of the step without "
        "them, or call optimizer.synchronize() before the capture begins");
  }
}

// CUDA events for ready events, reused instead of created and destroyed
// per operation. Any thread. An event goes back to the pool when the last
// reference to it is dropped, which the adapter does once the operation
// ended (its comm stream waited on the event long before).
class EventPool {
 public:
  static EventPool& instance() {
    // Leaked on purpose: events may be returned during static destruction.
    static EventPool* pool = new EventPool();
    return *pool;
  }

  // An event of device (the current device must be it), recorded on stream.
  std::shared_ptr<void> record(int device, cudaStream_t stream) {
    cudaEvent_t event = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& free = free_[device];
      if (!free.empty()) {
        event = free.back();
        free.pop_back();
      }
    }
    if (event == nullptr) check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                                "cudaEventCreateWithFlags");
    std::shared_ptr<void> out(static_cast<void*>(event), [this, device](void* e) {
      std::lock_guard<std::mutex> lock(mu_);
      free_[device].push_back(static_cast<cudaEvent_t>(e));
    });
    check(cudaEventRecord(event, stream), "cudaEventRecord");
    return out;
  }

 private:
  static void check(cudaError_t err, const char* call) {
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      throw kolo::Internal(std::string(call) + " for kolo's ready event: " +
                           cudaGetErrorString(err));
    }
  }
  std::mutex mu_;
  std::map<int, std::vector<cudaEvent_t>> free_;
};
#endif

// A CUDA event recorded on the current stream of tensor's device (the
// stream that produced it: in a gradient hook, autograd's stream for that
// device), as the void* cudaEvent_t Entry::readyEvent takes. The engine's
// comm stream waits on it; no host thread blocks. nullptr for CPU tensors.
// The event comes from EventPool and returns to it when the returned
// pointer is dropped. Throws InvalidArgument while that stream is capturing
// a CUDA graph.
inline std::shared_ptr<void> recordReady(const at::Tensor& tensor) {
#if KOLO_TORCH_WITH_CUDA
  if (tensor.is_cuda()) {
    const c10::cuda::CUDAGuard guard(tensor.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(tensor.get_device()).stream();
    checkNotCapturing(stream, "a collective was submitted");
    return EventPool::instance().record(tensor.get_device(), stream);
  }
#else
  (void)tensor;
#endif
  return nullptr;
}

// recordReady for a producer that submits one tensor at a time and waits
// for each submission to be enqueued before the next (a gradient bucket):
// one event, re-recorded, instead of one per submission. Re-recording is
// safe once the engine has enqueued the previous operation: its comm stream
// waited on the event then. record() returns the cudaEvent_t, nullptr for
// CPU tensors; it throws InvalidArgument while the stream is capturing a
// CUDA graph.
class ReadyEvent {
 public:
  void* record(const at::Tensor& tensor) {
#if KOLO_TORCH_WITH_CUDA
    if (tensor.is_cuda()) {
      const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(tensor.get_device()).stream();
      checkNotCapturing(stream, "a gradient bucket was submitted");
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

#if KOLO_TORCH_WITH_CUDA
// The caller's current stream of device waits on event (a kolo done event).
inline void streamWait(const at::Device& device, void* event) {
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  checkNotCapturing(stream, "a kolo result was waited for");
  const cudaError_t err = cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(event), 0);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw kolo::Internal(std::string("cudaStreamWaitEvent on kolo's done event: ") +
                         cudaGetErrorString(err));
  }
}
#endif

// The first stage of a kolo operation on tensors of device: once its work is
// enqueued (kolo::Handle::waitEnqueued), the caller's current stream of
// device waits for that work's done event. The host blocks only until the
// work is enqueued; a CPU operation is simply waited for. Throws the
// operation's error.
inline void waitOnCurrentStream(const kolo::Handle& handle, const at::Device& device) {
  void* event = handle.waitEnqueued();
#if KOLO_TORCH_WITH_CUDA
  if (event != nullptr && device.is_cuda()) streamWait(device, event);
#else
  (void)event;
  (void)device;
#endif
}

// waitOnCurrentStream for several operations: the host waits until each is
// enqueued (or done), then the current stream of each device waits once:
// on the done event of the operation enqueued last on the engine's comm
// stream of that device (kolo::Handle::lastDoneEvents). The comm stream
// completes its work in order, so that one event orders the caller's
// stream after every operation's output. Waits for every handle, then
// throws the first error.
inline void waitAllOnCurrentStream(
    const std::vector<std::pair<kolo::Handle, at::Device>>& handles) {
  std::exception_ptr error;
  std::vector<const kolo::Handle*> enqueued;
  for (const auto& [handle, device] : handles) {
    try {
      if (handle.waitEnqueued() != nullptr && device.is_cuda()) enqueued.push_back(&handle);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
#if KOLO_TORCH_WITH_CUDA
  for (const kolo::Handle::DoneEvent& last : kolo::Handle::lastDoneEvents(enqueued)) {
    streamWait(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(last.device)), last.event);
  }
#endif
}

// While it lives, the current stream of device (CUDA) is a stream of
// torch's pool, that this thread's work can be ordered on without
// touching another thread's current stream; nothing for the CPU.
class PoolStreamGuard {
 public:
  explicit PoolStreamGuard(const at::Device& device) {
#if KOLO_TORCH_WITH_CUDA
    if (device.is_cuda()) guard_.emplace(c10::cuda::getStreamFromPool(false, device.index()));
#else
    (void)device;
#endif
  }

 private:
#if KOLO_TORCH_WITH_CUDA
  std::optional<c10::cuda::CUDAStreamGuard> guard_;
#endif
};

// This thread's current device is device while it lives (CUDA); nothing
// for the CPU.
class DeviceGuard {
 public:
  explicit DeviceGuard(const at::Device& device) {
    if (device.is_cuda()) guard_.reset_device(device);
  }

 private:
  c10::OptionalDeviceGuard guard_;
};

}  // namespace kolo::torch::compat
