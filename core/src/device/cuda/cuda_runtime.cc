#include "device/cuda/cuda_runtime.h"

#include <cstring>
#include <string>
#include <thread>

#include <cuda_runtime_api.h>

#include "comm/cuda/batched_copy.h"
#include "comm/cuda/check.h"
#include "comm/cuda/memory.h"

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
thread_local int tPinned = -1;

}  // namespace

// Kernel descriptors travel from pinned host memory through a ring of
// slots: a slot is written again only once its upload has run, so the host
// waits only when kSlots launches are still queued on the stream.
struct CudaRuntime::PackRing {
  static constexpr int kSlots = 8;
  struct Slot {
    void* host = nullptr;
    size_t capacity = 0;
    cudaEvent_t uploaded = nullptr;
    bool inFlight = false;
  };
  Slot slots[kSlots];
  int next = 0;
  void* device = nullptr;  // descriptors on the device, reused by every launch
  size_t deviceCapacity = 0;

  ~PackRing() {
    for (Slot& s : slots) {
      if (s.uploaded != nullptr) (void)cudaEventDestroy(s.uploaded);
      if (s.host != nullptr) (void)cudaFreeHost(s.host);
    }
    if (device != nullptr) (void)cudaFree(device);
  }
};

CudaRuntime::~CudaRuntime() = default;

void CudaRuntime::pinThread(int device) {
  if (tPinned == device) return;
  if (tPinned >= 0) {
    throw Internal("kolo thread works on cuda:" + std::to_string(tPinned) +
                   " and was asked to switch to cuda:" + std::to_string(device));
  }
  comm::cuda::useDevice(device);  // a failing cudaSetDevice throws here
  tPinned = device;
}

int CudaRuntime::deviceOf(const void* ptr) { return comm::cuda::deviceOf(ptr); }

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
  std::unique_ptr<PackRing> ring;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = rings_.find(stream);
    if (it != rings_.end()) {
      ring = std::move(it->second);
      rings_.erase(it);
    }
  }
  ring.reset();
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
  const cudaError_t err = cudaEventQuery(native(event));
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  comm::cuda::throwCudaError(err, "cudaEventQuery(event)");
}

bool CudaRuntime::captured(Event event) {
  // An event last recorded in a capturing stream cannot be queried: that is
  // how the host learns it belongs to a graph being built.
  const cudaError_t err = cudaEventQuery(native(event));
  if (err == cudaErrorCapturedEvent) {
    (void)cudaGetLastError();
    return true;
  }
  if (err != cudaSuccess) (void)cudaGetLastError();
  return false;
}

bool CudaRuntime::elapsedMs(Event from, Event to, float* ms) noexcept {
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

CudaRuntime::PackRing& CudaRuntime::ringOf(Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& ring = rings_[stream];
  if (!ring) {
    ring = std::make_unique<PackRing>();
    for (PackRing::Slot& s : ring->slots) {
      KOLO_CUDA_CHECK(cudaEventCreateWithFlags(&s.uploaded, cudaEventDisableTiming));
    }
  }
  return *ring;
}

void CudaRuntime::pack(const std::vector<comm::cuda::CopyDesc>& copies, DataType dtype,
                       const comm::cuda::CopyTransform& transform, Stream stream) {
  const comm::cuda::CopyPlan plan = comm::cuda::planCopies(copies, elementSize(dtype));
  if (plan.chunks == 0) return;
  PackRing& ring = ringOf(stream);
  const size_t bytes = plan.descs.size() * sizeof(comm::cuda::DeviceCopyDesc);
  if (bytes > ring.deviceCapacity) {
    // Rare: queued kernels may still read the old descriptors.
    KOLO_CUDA_CHECK(cudaStreamSynchronize(native(stream)));
    if (ring.device != nullptr) KOLO_CUDA_CHECK(cudaFree(ring.device));
    ring.device = nullptr;
    ring.deviceCapacity = 0;
    const size_t next = comm::cuda::grownCapacity(0, bytes);
    KOLO_CUDA_CHECK(cudaMalloc(&ring.device, next));
    ring.deviceCapacity = next;
  }
  PackRing::Slot& slot = ring.slots[ring.next];
  ring.next = (ring.next + 1) % PackRing::kSlots;
  if (slot.inFlight) {
    // Wait only when the slot's upload is still queued (not for kernels).
    const cudaError_t q = cudaEventQuery(slot.uploaded);
    if (q == cudaErrorNotReady) {
      (void)cudaGetLastError();
      KOLO_CUDA_CHECK(cudaEventSynchronize(slot.uploaded));
    } else if (q != cudaSuccess) {
      comm::cuda::throwCudaError(q, "cudaEventQuery(descriptor upload)");
    }
    slot.inFlight = false;
  }
  if (bytes > slot.capacity) {
    if (slot.host != nullptr) KOLO_CUDA_CHECK(cudaFreeHost(slot.host));
    slot.host = nullptr;
    slot.capacity = 0;
    const size_t next = comm::cuda::grownCapacity(0, bytes);
    KOLO_CUDA_CHECK(cudaHostAlloc(&slot.host, next, cudaHostAllocPortable));
    slot.capacity = next;
  }
  std::memcpy(slot.host, plan.descs.data(), bytes);
  KOLO_CUDA_CHECK(
      cudaMemcpyAsync(ring.device, slot.host, bytes, cudaMemcpyHostToDevice, native(stream)));
  KOLO_CUDA_CHECK(cudaEventRecord(slot.uploaded, native(stream)));
  slot.inFlight = true;
  comm::cuda::launchBatchedCopy(static_cast<const comm::cuda::DeviceCopyDesc*>(ring.device),
                                static_cast<uint32_t>(plan.descs.size()), plan.chunks,
                                plan.chunkElements, dtype, transform, native(stream));
}

void CudaRuntime::synchronize(Stream stream) {
  KOLO_CUDA_CHECK(cudaStreamSynchronize(native(stream)));
}

bool CudaRuntime::settleFor(Stream stream, std::chrono::milliseconds limit) noexcept {
  // Polled, not cudaStreamSynchronize: that call cannot be given up on.
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
  const cudaError_t err = cudaStreamQuery(native(stream));
  if (err == cudaSuccess || err == cudaErrorNotReady) {
    if (err == cudaErrorNotReady) (void)cudaGetLastError();
    return Status::Ok();
  }
  return Status{ErrorCode::kInternal, "CUDA error on the comm stream: " +
                                          comm::cuda::describe(err) +
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
