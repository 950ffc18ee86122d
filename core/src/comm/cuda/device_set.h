// Per-device state of the GPU path: the comm stream, the fusion buffer
// (allocated once per device, grown rarely), pinned host staging and a pool
// of events, all through a device::Runtime (device/runtime.h): CUDA for
// users, the host runtime in tests. One DeviceSet per Engine, shared by
// every process set, so each device has one comm stream per engine and the
// collectives of every set's communicator run on it in the one global
// response order (NCCL deadlocks when kernels of two communicators overlap
// in different orders on different ranks). No globals: several engines
// (ranks as threads) can share a process.
//
// Threading: loop thread only (the engine's background thread, which the
// first DeviceContext pins to its device), except where a method says
// otherwise. Every kernel, copy and (for NCCL) every collective of one
// device is ordered on that device's comm stream, so pack -> collective ->
// unpack needs no events between them.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/copy_plan.h"
#include "device/runtime.h"
#include "kolo/types.h"

namespace kolo::comm::cuda {

// Events of one device and kind, reused: creating one per response would
// cost a driver call each time. take() hands out an event as a shared
// pointer (void* is the runtime's Event, for CUDA the cudaEvent_t) that
// goes back to the pool when the last copy is dropped, on any thread; the
// pool lives as long as any event it handed out.
class EventPool : public std::enable_shared_from_this<EventPool> {
 public:
  static std::shared_ptr<EventPool> create(std::shared_ptr<device::Runtime> runtime, int device,
                                           bool timing);
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // Loop thread (creating an event acts on the pinned device).
  std::shared_ptr<void> take();

 private:
  EventPool(std::shared_ptr<device::Runtime> runtime, int device, bool timing)
      : runtime_(std::move(runtime)), device_(device), timing_(timing) {}
  void give(device::Event event);

  const std::shared_ptr<device::Runtime> runtime_;
  const int device_;
  const bool timing_;
  std::mutex mu_;
  std::vector<device::Event> free_;  // guarded by mu_
};

class DeviceContext {
 public:
  // Pins the calling (loop) thread to device, then creates the comm stream.
  DeviceContext(std::shared_ptr<device::Runtime> runtime, int device);
  // Waits for the stream's work, then frees everything. Any thread.
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  device::Stream stream() const { return stream_; }
  device::Runtime& runtime() { return *runtime_; }

  // The fusion buffer: at least bytes, reused across responses. Growing it
  // never waits: the old block is freed once the stream passed the work
  // queued so far (the next growth or the context's end sees to it).
  void* fusion(size_t bytes) { return grow(fusion_, bytes, /*pinned=*/false); }
  // Second device buffer (reduce-scatter input with a prescale, neutral
  // buffers of joined ranks).
  void* scratch(size_t bytes) { return grow(scratch_, bytes, false); }
  // Pinned host staging for device tensors over a CPU backend. Callers
  // synchronise the stream before reusing it.
  void* staging(size_t bytes) { return grow(staging_, bytes, true); }

  // One pack launch on stream(): every copy, transformed (copy_plan.h).
  // Returns without waiting.
  void batchedCopy(const std::vector<device::CopyDesc>& copies, DataType dtype,
                   const device::CopyTransform& transform);
  // One tensor: a plain asynchronous copy when transform is a copy, else
  // batchedCopy. Returns without waiting.
  void copy(const void* src, void* dst, uint64_t count, DataType dtype,
            const device::CopyTransform& transform);
  // bytes between host and device (staging), ordered on stream().
  void copyAsync(void* dst, const void* src, size_t bytes, device::CopyKind kind);

  // The comm stream waits for event (a runtime Event, for CUDA a
  // cudaEvent_t, recorded by a producer on any stream of this device)
  // without blocking the host.
  void waitEvent(void* event);
  // Whether event was recorded on a stream under graph capture.
  bool captured(void* event);
  // An event recorded on the stream now (after everything enqueued so
  // far), from a pool; alive while the pointer is held. timing: an event
  // that times phases.
  std::shared_ptr<void> record(bool timing = false);
  // This context's comm stream, as a number no other context of the
  // process gets (a freed stream's address may come back; this does not).
  uint64_t id() const { return id_; }
  // How many events record() recorded so far: the last one's place in the
  // stream's order (the stream completes its work in that order).
  uint64_t recorded() const { return recorded_; }
  // fn(arg) runs on a runtime thread once the stream gets there: it must
  // not call the runtime. Later work on the stream waits until it returned.
  void launchHostFunc(void (*fn)(void*), void* arg);
  // Keeps object alive until the stream is destroyed, i.e. after the last
  // of its work ran (or, on a faulted device, never will): what host
  // functions on this stream point at.
  void keepAlive(std::shared_ptr<void> object) { kept_.push_back(std::move(object)); }
  // Blocks the calling thread until the stream is idle; throws Internal on
  // a device fault. Bounded: it polls, and gives up with the interrupt's
  // error (a peer failed, the engine aborts) or, past the limit, Timeout
  // (see bound()). Any thread.
  void synchronize();
  // What synchronize() polls while it waits: interrupt (ok: go on) at
  // least every kInterruptPoll, and the limit. DeviceSet sets it.
  void bound(std::chrono::milliseconds limit, std::function<Status()> interrupt);
  static constexpr std::chrono::milliseconds kInterruptPoll{100};
  // The device's sticky fault, ok while none. Any thread, never blocks.
  Status error() noexcept { return runtime_->streamError(stream_); }

 private:
  struct Buffer {
    void* data = nullptr;
    size_t capacity = 0;
  };
  void* grow(Buffer& buffer, size_t bytes, bool pinned);
  // A block the stream may still use, freed once done was reached.
  struct Retired {
    void* data;
    bool pinned;
    std::shared_ptr<void> done;
  };
  // Frees the retired blocks whose work is done (all: every one, after
  // the stream was destroyed).
  void freeRetired(bool all) noexcept;

  const std::shared_ptr<device::Runtime> runtime_;
  const int device_;
  const uint64_t id_;
  uint64_t recorded_ = 0;  // loop thread
  device::Stream stream_ = nullptr;
  Buffer fusion_;
  Buffer scratch_;
  Buffer staging_;
  std::shared_ptr<EventPool> doneEvents_;
  std::shared_ptr<EventPool> timingEvents_;
  std::vector<std::shared_ptr<void>> kept_;  // released after the stream is destroyed
  std::vector<Retired> retired_;
  std::chrono::milliseconds limit_{0};  // 0: synchronize() waits without a limit
  std::function<Status()> interrupt_;
};

class DeviceSet {
 public:
  // runtime: nullptr is the CUDA runtime (device::cudaRuntime()).
  // drainLimit: how long drain() and stopAll() wait for the comm streams to
  // go idle before the device counts as wedged.
  explicit DeviceSet(std::shared_ptr<device::Runtime> runtime = nullptr,
                     std::chrono::milliseconds drainLimit = std::chrono::seconds(10));
  // Destroys the contexts (each waits for its stream), unless the device is
  // wedged: then they are kept for good (keepForever), as destroying a
  // stream would wait for work that never ends.
  ~DeviceSet();
  DeviceSet(const DeviceSet&) = delete;
  DeviceSet& operator=(const DeviceSet&) = delete;
  // The context of device (>= 0), created on first use. Loop thread.
  DeviceContext& at(int device);
  device::Runtime& runtime() { return *runtime_; }
  const std::shared_ptr<device::Runtime>& runtimePtr() const { return runtime_; }

  // The rank's device: the first call pins it (kolo drives one device per
  // rank, as Horovod); a later call with another device throws
  // InvalidArgument naming both and the fix. what names the tensor. Loop
  // thread.
  void pin(int device, const std::string& what);
  // The pinned device, -1 before the first pin().
  int pinned() const { return pinned_; }

  // Blocks until every comm stream is idle or faulted, at most the drain
  // limit. True: the device touches no memory of the work enqueued so far.
  // False: work still runs (a collective waiting for a peer after an abort
  // that did not stop it; ncclCommAbort hangs in some NCCL versions), and
  // wedged() from now on. Any thread.
  bool drain() noexcept;
  // Whether a drain gave up: the device may still write into the memory of
  // any work it was given, so nothing of it may be freed. Any thread.
  bool wedged() const noexcept { return wedged_.load(std::memory_order_acquire); }

  // How to stop a communicator that enqueues on these streams (its
  // abortWith); every process set's GPU executor registers its own. Any
  // thread.
  void onStop(std::function<void(const Status&)> abort);
  // Aborts every registered communicator with why, then drain(): one set's
  // collective waiting for peers cannot hold up the drain after another
  // set's failure (they share the streams). Any thread.
  void stopAll(const Status& why) noexcept;

  // Bounds every context's synchronize() (DeviceContext::bound): by limit,
  // and by interrupt (a peer's failure, the engine's abort), besides a
  // stopAll() since. Set before the first at(). The engine sets it.
  void bound(std::chrono::milliseconds limit, std::function<Status()> interrupt);

 private:
  Status interrupted() const;

  std::shared_ptr<device::Runtime> runtime_;
  const std::chrono::milliseconds drainLimit_;
  std::atomic<bool> wedged_{false};
  int pinned_ = -1;
  mutable std::mutex mu_;  // guards contexts_ and stops_ (watcher threads drain too)
  std::map<int, std::unique_ptr<DeviceContext>> contexts_;
  std::vector<std::function<void(const Status&)>> stops_;
  Status stopped_;  // the first stopAll's why
  std::chrono::milliseconds limit_{0};
  std::function<Status()> interrupt_;
};

}  // namespace kolo::comm::cuda
