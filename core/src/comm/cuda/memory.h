// Device and pinned host memory that is allocated once and grown rarely,
// plus the small RAII helpers around the CUDA runtime that kolo uses.
//
// Threading: a buffer belongs to one thread (the engine's background
// thread); nothing here locks.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

namespace kolo::comm::cuda {

// Rounds a request up so that a buffer grows in few, large steps: to a
// multiple of 1 MiB and at least 1.5x the old capacity. Host logic, tested
// without a GPU.
size_t grownCapacity(size_t capacity, size_t request);

// Makes `device` current for the lifetime of the guard and restores the
// previous device afterwards. device < 0 leaves the current device alone.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Device memory on one device. data(bytes) returns at least bytes; growing
// frees the old block, which implicitly waits for work that used it
// (cudaFree synchronises the device), so it never invalidates work in flight.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(int device) : device_(device) {}
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data(size_t bytes);
  size_t capacity() const { return capacity_; }
  int device() const { return device_; }

 private:
  int device_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// Page-locked host memory (cudaHostAlloc, portable) for staging device
// tensors through a CPU backend and for kernel descriptors. Growing frees
// the old block: callers make sure no copy from or to it is in flight.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// CUDA events of one device and kind, reused: creating one per response
// would cost a driver call each time. take() hands out an event as a
// shared pointer (void* is the cudaEvent_t) that goes back to the pool when
// the last copy is dropped, on any thread; the pool lives as long as any
// event it handed out.
class EventPool : public std::enable_shared_from_this<EventPool> {
 public:
  // flags: cudaEventCreateWithFlags's (cudaEventDisableTiming, or 0 for
  // events that time phases).
  static std::shared_ptr<EventPool> create(int device, unsigned flags);
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  std::shared_ptr<void> take();

 private:
  EventPool(int device, unsigned flags) : device_(device), flags_(flags) {}
  void give(cudaEvent_t event);

  const int device_;
  const unsigned flags_;
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;  // guarded by mu_
};

// The device a pointer's memory lives on, or -1 for host memory (pageable
// or pinned) and for nullptr.
int deviceOf(const void* ptr);

// Number of usable CUDA devices; 0 when there is no device or no driver
// (then *why, when given, says what CUDA reported).
int deviceCount(std::string* why = nullptr);

}  // namespace kolo::comm::cuda
