// device::Runtime: the one seam through which kolo's GPU orchestration
// (execution/gpu_path, comm/cuda's DeviceSet, GpuExecutor and staging,
// common/completion_watcher's health check, the NCCL launch) reaches a
// device runtime. Two implementations share its semantics:
//
//   device/cuda/  CudaRuntime: the CUDA runtime API. What users get.
//   device/host/  HostRuntime: streams are in-order worker threads over host
//                 memory. A stand-in for an absent GPU, so that the same
//                 orchestration runs in every build, under the sanitizers.
//
// Semantics both keep (and the tests in tests/core/device_runtime_test.cc
// check on the host one):
//   - work on one stream runs in the order it was enqueued; enqueueing never
//     waits for the device;
//   - record(e, s) captures the work enqueued on s so far; reached(e) says
//     whether it finished; wait(s2, e) orders s2's later work after that
//     work (a never-recorded event is reached);
//   - hostFunc(s, fn, arg) calls fn(arg) on a runtime thread once s gets
//     there; fn must not call the runtime;
//   - a device fault is sticky: every later synchronize() on that device
//     throws it and streamError() reports it; work behind it never runs
//     (host functions included);
//   - synchronize(s) returns once s has nothing queued or running (so
//     nothing of s touches memory any more), then throws a fault.
//
// Threading: any thread may call any method, except where noted. Calls that
// create or launch (createStream, createEvent, allocDevice, pack) act on the
// calling thread's device, which pinThread() sets: kolo's own threads pin
// themselves once and never switch back.
//
// Graph capture (CUDA's stream capture modes): while a thread of the user's
// captures a CUDA graph in global mode (torch.cuda.graph's default), a
// potentially unsafe call (a query, a synchronize, an allocation or free)
// from any other thread in global mode fails and invalidates that capture.
// pinThread() therefore also switches the thread to thread-local capture
// mode, for good: kolo's threads never break a user's capture. The methods
// any thread may call (reached, captured, elapsedMs, settleFor,
// streamError) switch an unpinned caller for the call only. The others that
// are potentially unsafe (createStream, destroyStream, createEvent,
// synchronize, allocDevice, freeDevice, allocPinned, freePinned) are for
// pinned threads.
//
// Handles are opaque; for CUDA they are the cudaStream_t / cudaEvent_t
// values themselves, so an Event may come from the user's framework.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "device/copy_plan.h"
#include "kolo/error.h"
#include "kolo/types.h"

namespace kolo::device {

struct StreamTag;
struct EventTag;
using Stream = StreamTag*;
using Event = EventTag*;

enum class CopyKind : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };

class Runtime {
 public:
  virtual ~Runtime() = default;

  // "cuda" or "host": for messages.
  virtual const char* name() const = 0;

  // The calling thread works on device from now on. The first call on a
  // thread makes it current (its failure throws Internal) and switches the
  // thread to thread-local capture mode (above); a later call with the same
  // device costs nothing; another device throws Internal (a kolo thread
  // never switches devices, and never "restores" one it did not have).
  virtual void pinThread(int device) = 0;
  // The device ptr's memory lives on, -1 for host memory and nullptr.
  virtual int deviceOf(const void* ptr) = 0;
  // How many devices this process sees (CUDA_VISIBLE_DEVICES applied).
  virtual int deviceCount() = 0;

  // A stream on device (non-blocking with respect to other streams).
  virtual Stream createStream(int device) = 0;
  // Waits for the stream's work (errors ignored), then destroys it.
  virtual void destroyStream(Stream stream) noexcept = 0;
  // timing: the event can time phases (elapsedMs).
  virtual Event createEvent(int device, bool timing) = 0;
  virtual void destroyEvent(Event event) noexcept = 0;
  virtual void record(Event event, Stream stream) = 0;
  // stream's later work waits for event's recorded work; the host does not.
  virtual void wait(Stream stream, Event event) = 0;
  // Whether event's recorded work finished. Throws on a fault.
  virtual bool reached(Event event) = 0;
  // Whether event was recorded on a stream being captured into a graph
  // (CUDA graphs): waiting on it would pull the waiting stream into the
  // capture. Throws on a fault or an unusable event (never "not captured"
  // for an error).
  virtual bool captured(Event event) = 0;
  // Milliseconds between two reached timing events; false if unknown.
  virtual bool elapsedMs(Event from, Event to, float* ms) noexcept = 0;
  // fn(arg) on a runtime thread once stream gets there (see above).
  virtual void hostFunc(Stream stream, void (*fn)(void*), void* arg) = 0;
  // An asynchronous copy of bytes, ordered on stream.
  virtual void copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream stream) = 0;
  // The batched pack/unpack kernel (device/copy_plan.h): one launch that
  // copies every desc, transformed, ordered on stream. Returns at once; the
  // descriptors need not outlive the call.
  virtual void pack(const std::vector<device::CopyDesc>& copies, DataType dtype,
                    const device::CopyTransform& transform, Stream stream) = 0;
  // Blocks until stream is idle (see above); throws Internal on a fault.
  virtual void synchronize(Stream stream) = 0;
  // Waits up to limit for stream to run nothing more: true once it is idle
  // or its device faulted (a faulted device runs nothing), false when work
  // still runs at the limit (a kernel waiting for a peer that never comes,
  // after an abort that did not stop it). Any thread; pins nothing.
  virtual bool settleFor(Stream stream, std::chrono::milliseconds limit) noexcept = 0;
  // The sticky fault of stream's device, ok while there is none. A
  // host-side read that never blocks: the completion watcher's health check.
  virtual Status streamError(Stream stream) noexcept = 0;

  // Device memory (on the calling thread's pinned device = device) and
  // page-locked host memory. free* wait for nothing: callers free only what
  // no queued work uses.
  virtual void* allocDevice(int device, size_t bytes) = 0;
  virtual void freeDevice(void* ptr) noexcept = 0;
  virtual void* allocPinned(size_t bytes) = 0;
  virtual void freePinned(void* ptr) noexcept = 0;
};

// The runtime users get: CUDA in a build with KOLO_WITH_CUDA, else nullptr.
// One per process (the CUDA runtime is per process too).
std::shared_ptr<Runtime> cudaRuntime();

}  // namespace kolo::device
