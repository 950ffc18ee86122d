// GpuOps: the engine's entry point to the GPU path, free of CUDA types so
// executor.cc can hold one in every build (no #if in engine code). Built by
// comm::createGpuOps (select.h) over the engine's device runtime (CUDA, or
// the host runtime of Config::deviceRuntime); it throws InvalidArgument
// naming KOLO_GPU_OPERATIONS in a build without either. The implementation
// is cuda::GpuExecutor (gpu_executor.h): read its header for the stream
// contract. Events (cudaEvent_t for CUDA) travel as void*.
//
// A response is beginResponse, waitReady for each input, markReady, the
// operation, endResponse: all of it only enqueues work on the device's comm
// stream. whenDone then says when that work has finished.
//
// Threading: loop thread only, every rank in the same response order.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kolo/error.h"

#include "kolo/types.h"

namespace kolo::comm::cuda {

// One tensor of a GPU response on this rank. input == nullptr: this rank has
// joined and contributes the reduce op's neutral value (output unused).
struct DeviceTensor {
  const void* input = nullptr;
  void* output = nullptr;
  uint64_t count = 0;
};

// Whether a response's GPU work finished well, asked from any thread by a
// waiter that polls the done event itself instead of waiting for the
// completion thread (Handle::wait; execution/handle_state.h).
class FenceProbe {
 public:
  virtual ~FenceProbe() = default;
  // True once the device reached doneEvent (a GpuFence's) and the
  // collectives report no error since: the work before the event finished
  // and its outputs are valid. False while the work runs, and on any
  // failure, which the completion thread then reports: a faulted device
  // never reaches the event (both runtimes throw from reached() instead);
  // an aborted collective's kernel exits and the work behind it does reach
  // the event, so the collectives' asynchronous error is read after the
  // event was seen reached (every abort sets it before the kernels exit).
  // False too once the executor is gone (its watcher settled every fence
  // then). Never throws, never waits for the device; it may briefly take
  // the collectives' lock. The calling thread queries a device event (for
  // CUDA, cudaEventQuery): its current device should be the work's. fence:
  // the GpuFence's id; once it is seen done, the completion thread learns
  // of it from here (GpuOps::flushSignals).
  virtual bool succeeded(void* doneEvent, uint64_t fence) noexcept = 0;
};

// A response's GPU work once it is enqueued on the comm stream.
struct GpuFence {
  int device = -1;
  uint64_t id = 0;  // the device's completion watcher's fence
  // A cudaEventDisableTiming cudaEvent_t recorded after the work: a
  // consumer stream waits on it (cudaStreamWaitEvent). Alive while held.
  std::shared_ptr<void> doneEvent;
  // Where doneEvent lies in the engine's GPU work: the comm stream it was
  // recorded on (DeviceContext::id(), never reused in a process) and its
  // place there (DeviceContext::recorded(): later records count higher).
  // The stream completes its work in order, so a consumer that waits on
  // the highest-placed done event of a stream is ordered after all of them.
  uint64_t stream = 0;
  uint64_t sequence = 0;
  // Asks whether the work finished well; shared by the executor's fences.
  std::shared_ptr<FenceProbe> probe;
  std::shared_ptr<void> timing;  // the executor's phase events (timed responses)
};

// When the phases of a timed response ran on the device (microseconds of
// the steady clock, as timeline::Timeline::now()). A phase the response did
// not have lasts zero.
struct GpuPhases {
  enum Phase { kStart, kReady, kPacked, kReduced, kUnpacked, kCount };
  bool timed = false;
  int64_t at[kCount] = {};
};

class GpuOps {
 public:
  virtual ~GpuOps() = default;

  // The data plane's name for timelines: "nccl", "gloo+staging", ...
  virtual const char* name() const = 0;

  // The rank's device: the first call pins it for the engine (every process
  // set); another device throws InvalidArgument naming both and the fix.
  // what names the tensor. The pinned device, -1 before.
  virtual void pin(int device, const std::string& what) = 0;
  virtual int pinned() const = 0;
  // How many devices the process sees.
  virtual int deviceCount() = 0;

  // The comm stream of device waits for cudaEvent (a cudaEvent_t recorded
  // by the tensor's producer); the host does not block.
  virtual void waitReady(int device, void* cudaEvent) = 0;
  // Whether cudaEvent was recorded while its stream was being captured into
  // a CUDA graph: waiting on it would pull the comm stream into the capture.
  virtual bool captured(int device, void* cudaEvent) = 0;

  // Fused allreduce of tensors; op may be kAverage.
  virtual void allreduce(int device, const std::vector<DeviceTensor>& tensors, DataType dtype,
                         ReduceOp op, double prescale, double postscale) = 0;
  virtual void broadcast(int device, const DeviceTensor& tensor, DataType dtype, int root) = 0;
  virtual void allgatherv(int device, const void* in, void* out,
                          const std::vector<size_t>& counts, DataType dtype) = 0;
  virtual void alltoallv(int device, const void* in, const std::vector<size_t>& sendCounts,
                         void* out, const std::vector<size_t>& recvCounts, DataType dtype) = 0;
  // Joined ranks pass in == nullptr (reducescatter) or out == nullptr
  // (allgatherv, alltoallv): neutral values / scratch are used.
  virtual void reducescatter(int device, const void* in, void* out,
                             const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                             double prescale, double postscale) = 0;

  // The comm stream (a cudaStream_t) of device: outputs are written there.
  virtual void* stream(int device) = 0;

  // Brackets one response: begin before its first call above (timed: record
  // the phase boundaries for the timeline, GpuPhases), end after its last.
  // end() enqueues the fence and returns at once: the host never waits for
  // the device here.
  virtual void beginResponse(int device, bool timed) = 0;
  // The inputs' ready events are waited for (after waitReady calls).
  virtual void markReady(int device) = 0;
  virtual GpuFence endResponse(int device) = 0;
  // How the completion thread learns that the device got to a fence: a
  // waiter that polls the fence's done event reports it (FenceProbe), and
  // a host function placed on the comm stream after fences reports them
  // all. endResponse places none (a host function holds the comm stream,
  // and so the next response's work, until the driver's callback thread
  // ran it); flushSignals places one after every fence opened before
  // openedBefore and not yet followed by one, unless waiters reported them
  // all already. The engine calls it at the
  // end of each loop iteration for the fences older than its spin time, and
  // for all of them before its thread sleeps: while a caller's small ops
  // follow one another, their waiters report them and no host function
  // runs. A timed response (beginResponse) gets its host function at once
  // (it anchors the phase times). Never throws: a failure to place it fails
  // the fences (whenDone).
  virtual void flushSignals(std::chrono::steady_clock::time_point openedBefore) noexcept = 0;
  // Runs done once fence's work has finished (ok) or failed (an error from
  // NCCL's asynchronous error check, a CUDA error, or Timeout after
  // KOLO_TIMEOUT), on the device's completion thread; never on the caller's
  // thread, never while an engine lock is held. Every fence gets exactly one
  // whenDone, right after endResponse.
  using Done = std::function<void(const Status&, const GpuPhases&)>;
  virtual void whenDone(const GpuFence& fence, Done done) = 0;
  // The engine failed for another reason, or a response threw after it
  // enqueued work: the work in flight stops (the communicator is aborted)
  // and its fences fail with why. Returns once the devices no longer touch
  // any memory of that work (the comm streams drained), so the caller may
  // release the tensors, or once the drain gave up (DeviceSet::wedged: then
  // nothing of that work may be freed).
  virtual void abort(const Status& why) = 0;
};

}  // namespace kolo::comm::cuda
