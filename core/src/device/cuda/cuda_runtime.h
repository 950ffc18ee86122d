// CudaRuntime: device::Runtime over the CUDA runtime API, what users get.
// Streams and events are the cudaStream_t / cudaEvent_t values themselves;
// pack() launches comm/cuda/batched_copy.cu.
//
// Threading: as device::Runtime. create*/alloc/pack act on the calling
// thread's current device, which pinThread() set (cudaSetDevice once per
// thread, never restored).
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "device/runtime.h"

namespace kolo::device::cuda {

class CudaRuntime final : public Runtime {
 public:
  CudaRuntime() = default;
  ~CudaRuntime() override;

  const char* name() const override { return "cuda"; }
  void pinThread(int device) override;
  int deviceOf(const void* ptr) override;
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
  void pack(const std::vector<comm::cuda::CopyDesc>& copies, DataType dtype,
            const comm::cuda::CopyTransform& transform, Stream stream) override;
  void synchronize(Stream stream) override;
  bool settleFor(Stream stream, std::chrono::milliseconds limit) noexcept override;
  Status streamError(Stream stream) noexcept override;
  void* allocDevice(int device, size_t bytes) override;
  void freeDevice(void* ptr) noexcept override;
  void* allocPinned(size_t bytes) override;
  void freePinned(void* ptr) noexcept override;

 private:
  struct PackRing;  // a stream's descriptor uploads (cuda_runtime.cc)
  PackRing& ringOf(Stream stream);

  std::mutex mu_;  // guards rings_
  std::map<Stream, std::unique_ptr<PackRing>> rings_;
};

}  // namespace kolo::device::cuda
