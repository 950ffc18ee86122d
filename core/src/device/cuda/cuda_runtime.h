// CudaRuntime: device::Runtime over the CUDA runtime API, what users get.
// Streams and events are the cudaStream_t / cudaEvent_t values themselves;
// pack() launches device/cuda/batched_copy.cu with its descriptors as kernel
// parameters: it never waits for the device, records no event and
// allocates no device memory.
//
// Threading: as device::Runtime. create*/alloc/pack act on the calling
// thread's current device, which pinThread() set (cudaSetDevice once per
// thread, never restored).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "device/runtime.h"

namespace kolo::device::cuda {

class CudaRuntime final : public Runtime {
 public:
  CudaRuntime() = default;
  ~CudaRuntime() override;

  const char* name() const override { return "cuda"; }
  void pinThread(int device) override;
  int deviceOf(const void* ptr) override;
  int deviceCount() override;
  Stream createStream(int device) override;
  void destroyStream(Stream stream) noexcept override;
  Event createEvent(int device, bool timing) override;
  void destroyEvent(Event event) noexcept override;
  void record(Event event, Stream stream) override;
  void wait(Stream stream, Event event) override;
  bool reached(Event event) override;
  bool captured(Event event) override;
  bool elapsedMs(Event from, Event to, float* ms) noexcept override;
  void hostFunc(Stream stream, void (*fn)(void*), void* arg) override;
  void copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream stream) override;
  void pack(const std::vector<device::CopyDesc>& copies, DataType dtype,
            const device::CopyTransform& transform, Stream stream) override;
  void synchronize(Stream stream) override;
  bool settleFor(Stream stream, std::chrono::milliseconds limit) noexcept override;
  Status streamError(Stream stream) noexcept override;
  void* allocDevice(int device, size_t bytes) override;
  void freeDevice(void* ptr) noexcept override;
  void* allocPinned(size_t bytes) override;
  void freePinned(void* ptr) noexcept override;

 private:
  // The SM count and threads per SM of device (the pack grid's bound),
  // queried at the device's first pack and cached.
  struct DeviceShape {
    int sms = 0;
    int threadsPerSm = 0;
  };
  DeviceShape shapeOf(int device);

  static constexpr int kCachedDevices = 64;  // devices beyond are queried at every pack
  // (sms << 32 | threadsPerSm) per device; 0 until queried. Any thread.
  std::atomic<uint64_t> shapes_[kCachedDevices] = {};
};

}  // namespace kolo::device::cuda
