#include "device/cuda/cuda_runtime.h"

#include <string>
#include <thread>

#include <cuda_runtime_api.h>

#include "device/cuda/batched_copy.h"
#include "device/cuda/check.h"
#include "device/cuda/memory.h"

namespace kolo::device {

std::shared_ptr<Runtime> cudaRuntime() {
  static const std::shared_ptr<Runtime> runtime = std::make_shared<cuda::CudaRuntime>();
  return runtime;
}

namespace cuda {
namespace {

cudaStream_t native(Stream s) { return reinterpret_cast<cudaStream_t>(s); }
cudaEvent_t native(Event e) { return reinterpret_cast<cudaEvent_t>(e); }

// The device the calling thread was pinned to by pinThread (-1: none).
// A pinned thread is in thread-local capture mode for good.
thread_local int tPinned = -1;

// For its life, an unpinned caller is in thread-local capture mode: its
// query does not invalidate another thread's global-mode graph capture
// (device/runtime.h). Costs nothing on a pinned thread.
class CaptureSafe {
 public:
  CaptureSafe() {
    if (tPinned >= 0) return;
    mode_ = cudaStreamCaptureModeThreadLocal;
    switched_ = cudaThreadExchangeStreamCaptureMode(&mode_) == cudaSuccess;
  }
  ~CaptureSafe() {
    if (switched_) (void)cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  CaptureSafe(const CaptureSafe&) = delete;
  CaptureSafe& operator=(const CaptureSafe&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeGlobal;
  bool switched_ = false;
};

}  // namespace

CudaRuntime::~CudaRuntime() = default;

void CudaRuntime::pinThread(int device) {
  if (tPinned == device) return;
  if (tPinned >= 0) {
    throw Internal("kolo thread works on cuda:" + std::to_string(tPinned) +
                   " and was asked to switch to cuda:" + std::to_string(device));
  }
  device::cuda::useDevice(device);  // a failing cudaSetDevice throws here
  // kolo's queries and synchronizes must not break a user's global-mode
  // graph capture on another thread (pytorch's NCCL watchdog hit that).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
  KOLO_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  tPinned = device;
}

int CudaRuntime::deviceOf(const void* ptr) { return device::cuda::deviceOf(ptr); }

int CudaRuntime::deviceCount() {
  int n = 0;
  KOLO_CUDA_CHECK(cudaGetDeviceCount(&n));
  return n;
}

Stream CudaRuntime::createStream(int device) {
  pinThread(device);
  int least = 0, greatest = 0;
  KOLO_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s = nullptr;
  KOLO_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
  return reinterpret_cast<Stream>(s);
}

void CudaRuntime::destroyStream(Stream stream) noexcept {
  if (stream == nullptr) return;
  (void)cudaStreamSynchronize(native(stream));
  (void)cudaStreamDestroy(native(stream));
}

Event CudaRuntime::createEvent(int device, bool timing) {
  pinThread(device);
  cudaEvent_t e = nullptr;
  KOLO_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return reinterpret_cast<Event>(e);
}

void CudaRuntime::destroyEvent(Event event) noexcept { (void)cudaEventDestroy(native(event)); }

void CudaRuntime::record(Event event, Stream stream) {
  KOLO_CUDA_CHECK(cudaEventRecord(native(event), native(stream)));
}

void CudaRuntime::wait(Stream stream, Event event) {
  KOLO_CUDA_CHECK(cudaStreamWaitEvent(native(stream), native(event), 0));
}

bool CudaRuntime::reached(Event event) {
  CaptureSafe safe;
  const cudaError_t err = cudaEventQuery(native(event));
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  device::cuda::throwCudaError(err, "cudaEventQuery(event)");
}

bool CudaRuntime::captured(Event event) {
  // An event last recorded in a capturing stream cannot be queried: that is
  // how the host learns it belongs to a graph being built.
  CaptureSafe safe;
  const cudaError_t err = cudaEventQuery(native(event));
  if (err == cudaErrorCapturedEvent) {
    (void)cudaGetLastError();
    return true;
  }
  if (err == cudaSuccess || err == cudaErrorNotReady) {
    if (err == cudaErrorNotReady) (void)cudaGetLastError();
    return false;
  }
  // Anything else (a fault, an invalid event) is not "not captured": the
  // caller's error names it.
  device::cuda::throwCudaError(err, "cudaEventQuery(ready event)");
}

bool CudaRuntime::elapsedMs(Event from, Event to, float* ms) noexcept {
  CaptureSafe safe;
  if (cudaEventElapsedTime(ms, native(from), native(to)) == cudaSuccess) return true;
  (void)cudaGetLastError();
  return false;
}

void CudaRuntime::hostFunc(Stream stream, void (*fn)(void*), void* arg) {
  KOLO_CUDA_CHECK(cudaLaunchHostFunc(native(stream), fn, arg));
}

void CudaRuntime::copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream stream) {
  const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyDeviceToDevice;
  KOLO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, native(stream)));
}

CudaRuntime::DeviceShape CudaRuntime::shapeOf(int device) {
  const bool cached = device >= 0 && device < kCachedDevices;
  if (cached) {
    const uint64_t packed = shapes_[device].load(std::memory_order_relaxed);
    if (packed != 0) return {static_cast<int>(packed >> 32), static_cast<int>(packed & 0xffffffff)};
  }
  DeviceShape shape;
  KOLO_CUDA_CHECK(cudaDeviceGetAttribute(&shape.sms, cudaDevAttrMultiProcessorCount, device));
  KOLO_CUDA_CHECK(
      cudaDeviceGetAttribute(&shape.threadsPerSm, cudaDevAttrMaxThreadsPerMultiProcessor, device));
  if (cached) {
    shapes_[device].store(
        static_cast<uint64_t>(shape.sms) << 32 | static_cast<uint32_t>(shape.threadsPerSm),
        std::memory_order_relaxed);
  }
  return shape;
}

void CudaRuntime::pack(const std::vector<device::CopyDesc>& copies, DataType dtype,
                       const device::CopyTransform& transform, Stream stream) {
  const device::CopyPlan plan = device::planCopies(copies, elementSize(dtype));
  if (plan.chunks == 0) return;
  int device = tPinned;
  if (device < 0) KOLO_CUDA_CHECK(cudaGetDevice(&device));
  const DeviceShape shape = shapeOf(device);
  for (const device::CopyLaunch& l : plan.launches) {
    device::cuda::LaunchShape launch;
    launch.descs = plan.descs.data() + l.firstDesc;
    launch.numDescs = l.numDescs;
    launch.chunks = l.chunks;
    launch.chunkElements = plan.chunkElements;
    launch.grid = device::copyGridSize(l.chunks, shape.sms, shape.threadsPerSm);
    device::cuda::launchBatchedCopy(launch, dtype, transform, native(stream));
  }
}

void CudaRuntime::synchronize(Stream stream) {
  KOLO_CUDA_CHECK(cudaStreamSynchronize(native(stream)));
}

bool CudaRuntime::settleFor(Stream stream, std::chrono::milliseconds limit) noexcept {
  // Polled, not cudaStreamSynchronize: that call cannot be given up on.
  CaptureSafe safe;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    const cudaError_t err = cudaStreamQuery(native(stream));
    if (err != cudaErrorNotReady) {
      if (err != cudaSuccess) (void)cudaGetLastError();  // a fault: nothing runs any more
      return true;
    }
    (void)cudaGetLastError();
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited >= limit) return false;
    if (i < 100) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

Status CudaRuntime::streamError(Stream stream) noexcept {
  // cudaStreamQuery returns a sticky fault of the context (an illegal
  // address in any kernel) without waiting; NotReady and Success are fine.
  CaptureSafe safe;
  const cudaError_t err = cudaStreamQuery(native(stream));
  if (err == cudaSuccess || err == cudaErrorNotReady) {
    if (err == cudaErrorNotReady) (void)cudaGetLastError();
    return Status::Ok();
  }
  return Status{ErrorCode::kInternal, "CUDA error on the comm stream: " +
                                          device::cuda::describe(err) +
                                          " (a kernel faulted; the CUDA context is unusable)"};
}

void* CudaRuntime::allocDevice(int device, size_t bytes) {
  pinThread(device);
  void* p = nullptr;
  KOLO_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

void CudaRuntime::freeDevice(void* ptr) noexcept { (void)cudaFree(ptr); }

void* CudaRuntime::allocPinned(size_t bytes) {
  void* p = nullptr;
  KOLO_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  return p;
}

void CudaRuntime::freePinned(void* ptr) noexcept { (void)cudaFreeHost(ptr); }

}  // namespace cuda
}  // namespace kolo::device
