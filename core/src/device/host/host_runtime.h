// HostRuntime: device::Runtime over host memory and threads, with CUDA's
// ordering semantics (device/runtime.h). It stands in for a GPU that is
// absent: the GPU orchestration (gpu_path, GpuExecutor, the completion
// watcher, staging, process sets) runs over it in every build and under
// the sanitizers. It is not a way to run kolo without a GPU in production.
//
// One HostRuntime is one machine: `devices` devices whose memory is host
// memory tagged with its device (allocDevice), each stream an in-order
// worker thread. The ranks of an in-process test share one instance (as
// the ranks of a process share the CUDA driver), through
// Config::deviceRuntime.
//
// Beyond CUDA: faults can be injected at a stage of a device's work
// (faultAt), streams can be put into capture mode (beginCapture), and the
// device collectives of comm/host/collectives.h meet in its cliques.
//
// Threading: every method from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device/runtime.h"

namespace kolo::device::host {

class Clique;
class DeviceTurns;

class HostRuntime final : public Runtime {
 public:
  // The kinds of device work a fault can be injected into.
  enum class Stage : uint8_t { kPack, kCopy, kHostFunc, kCollective, kCount };

  explicit HostRuntime(int devices = 2);
  // Streams still alive are drained and stopped.
  ~HostRuntime() override;

  const char* name() const override { return "host"; }
  void pinThread(int device) override;
  int deviceOf(const void* ptr) override;
  int deviceCount() override {
    countCall(Method::kDeviceCount);
    return devices_;
  }
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

  int devices() const { return devices_; }
  // deviceOf without counting a call: the stand-in collectives check their
  // buffers with it on every call, where NCCL makes no runtime call.
  int ownerOf(const void* ptr) const;

  // The nth (1 = the next) piece of stage's work enqueued on device from
  // now on faults the device when it would run, with message (like a
  // kernel's cudaErrorIllegalAddress): it and everything after it on the
  // device never run, and the fault is sticky.
  void faultAt(int device, Stage stage, int nth, const std::string& message);
  // The sticky fault of device (ok while none).
  Status deviceError(int device) const;

  // Tests: every host function enqueued from now on first calls before()
  // on its stream's thread, which may block: the stream is held there, as
  // behind a slow host function (the completion watcher learns of nothing
  // meanwhile; the work before it, its done event included, has run).
  // Empty: none.
  void beforeHostFunctions(std::function<void()> before);
  // Tests: synchronize() and settleFor() call hook(device of the stream)
  // first, on the waiting thread. Empty: none.
  void beforeWaits(std::function<void(int device)> hook);

  // Work of stage on stream (device collectives): fn runs in stream order
  // on the stream's thread, unless the device faulted first.
  void launch(Stream stream, Stage stage, std::function<void()> fn);

  // CUDA's stream capture modes (cudaStreamCaptureMode), of a capture and
  // of a thread. Every thread starts in kGlobal; pinThread switches it to
  // kThreadLocal for good (device/runtime.h).
  enum class CaptureMode : uint8_t { kGlobal, kThreadLocal, kRelaxed };

  // The calling thread captures stream into a graph (the user's stream, as
  // torch.cuda.graph does): events recorded on it meanwhile count as
  // captured. While it lasts, a potentially unsafe call (device/runtime.h)
  // from a thread CUDA prohibits it to (another thread in kGlobal mode
  // while the capture's mode is kGlobal, or the capturing thread itself
  // unless kRelaxed) throws Internal (or, where the method cannot throw,
  // is only noted) and invalidates the capture, as in CUDA.
  void beginCapture(Stream stream, CaptureMode mode = CaptureMode::kGlobal);
  // Ends stream's capture; false when a prohibited call invalidated it
  // (CUDA's cudaStreamEndCapture fails then), with what that call was.
  bool endCapture(Stream stream, std::string* why = nullptr);
  // cudaThreadExchangeStreamCaptureMode: sets the calling thread's mode,
  // returns the one it had (tests: a thread of the user's).
  CaptureMode exchangeCaptureMode(CaptureMode mode);

  // The calling thread's pinned device, -1 when none; how many threads
  // ever pinned device (tests: kolo threads touch only their rank's device).
  int currentDevice() const;
  int threadsPinnedTo(int device) const;
  // Whether every stream of device has nothing queued or running: nothing
  // of the device touches memory now (tests).
  bool idle(int device) const;

  // The calls of the Runtime methods so far (each one at least one CUDA
  // runtime call in CudaRuntime), by the threads that made them: pinned
  // ones (kolo's own threads pin themselves) and the others (the training
  // side: callers of enqueue and wait). Tests count a step's from the
  // difference of two reads.
  // By method too (indexed by Method; methodName names it), as a path's
  // cost is read in bench_gpu_path_host.
  enum class Method : uint8_t {
    kPinThread, kDeviceOf, kDeviceCount, kAllocDevice, kFreeDevice, kAllocPinned, kFreePinned,
    kCreateStream, kDestroyStream, kCreateEvent, kDestroyEvent, kRecord, kWait, kReached,
    kCaptured, kElapsedMs, kHostFunc, kCopy, kPack, kSynchronize, kSettleFor, kStreamError,
    kCount
  };
  static constexpr size_t kMethods = static_cast<size_t>(Method::kCount);
  static const char* methodName(Method method);
  struct Calls {
    uint64_t pinned = 0;
    uint64_t unpinned = 0;
    std::array<uint64_t, kMethods> pinnedBy{};
    std::array<uint64_t, kMethods> unpinnedBy{};
  };
  Calls calls() const;
  // The calls the calling thread made so far (tests: one rank's training
  // side among several ranks' threads).
  uint64_t callsOnThisThread() const;

  // The clique of `size` members named id (device/host/collectives.h), made
  // by the first member to ask; newCliqueId() names a new one (the
  // ncclGetUniqueId of this runtime).
  // A device runs one clique's collective at a time (device_turns.h):
  // collectives issued in different orders on two devices fail at once.
  std::shared_ptr<Clique> clique(uint64_t id, int size);
  uint64_t newCliqueId();
  // Tests: the id of the clique whose collective holds device now (0: none).
  uint64_t collectiveOn(int device) const;
  // Tests: no stream of device can go on by itself: each is idle, waits
  // for an event, or runs a collective (which may wait for its peers).
  bool settled(int device) const;

 private:
  struct HostStream;
  struct HostEvent;
  struct Task {
    Stage stage = Stage::kCount;  // kCount: bookkeeping that cannot fault (record, wait)
    std::function<void()> fn;
    std::string fault;  // non-empty: this piece of work faults the device
  };
  HostStream& streamOf(Stream stream) const;
  std::shared_ptr<HostEvent> eventOf(Event event) const;
  void checkDevice(int device) const;
  void countCall(Method method) const;
  // Queues fn on stream; stage's injected fault, if this is the one.
  void enqueue(Stream stream, Stage stage, std::function<void()> fn);
  void runStream(HostStream* s);
  void faultLocked(int device, const std::string& message);
  // The calling thread's capture mode; kThreadLocal once pinned.
  CaptureMode modeLocked() const;
  // What CUDA does with a potentially unsafe call (what) from the calling
  // thread while streams capture: a prohibited one invalidates every
  // capture it breaks and, when mayThrow, throws Internal.
  void unsafeCallLocked(const char* what, bool mayThrow);
  // For its life, an unpinned caller is in kThreadLocal mode (the methods
  // any thread may call, as the CUDA runtime's do).
  class CallerSafe;

  const int devices_;
  mutable std::array<std::atomic<uint64_t>, kMethods> pinnedCalls_{};
  mutable std::array<std::atomic<uint64_t>, kMethods> unpinnedCalls_{};
  mutable std::mutex mu_;  // guards everything below and every stream's and event's state
  std::condition_variable changed_;  // an event completed, a fault, a stream went idle
  std::vector<Status> faults_;       // per device
  struct Injection {
    int countdown = 0;
    std::string message;
  };
  std::map<std::pair<int, Stage>, Injection> injections_;
  // A thread's pinned device and capture mode are thread_local state
  // (host_threads.cc), per runtime by id_: a thread id can come back once
  // its thread ended, a thread_local cannot.
  const uint64_t id_;
  std::vector<int> pinCount_;
  std::map<uintptr_t, std::pair<size_t, int>> allocations_;  // start -> (bytes, device)
  std::vector<std::unique_ptr<HostStream>> streams_;
  std::map<uint64_t, std::weak_ptr<Clique>> cliques_;
  std::unique_ptr<DeviceTurns> turns_;  // every clique's devices (set in the constructor)
  std::shared_ptr<const std::function<void()>> beforeHostFunc_;  // beforeHostFunctions
  // Host functions run on a callback thread per device (made on the
  // device's first hostFunc), as CUDA runs them on a driver thread, and
  // the stream holds until the function returned.
  struct Callbacks {
    std::deque<std::function<void()>> queue;
    std::condition_variable work;
    bool stop = false;
    std::thread thread;
  };
  std::vector<std::unique_ptr<Callbacks>> callbacks_;  // per device
  // Hands call to device's callback thread; mu_ held.
  void callBackLocked(int device, std::function<void()> call);
  void runCallbacks(Callbacks* c);
  std::shared_ptr<const std::function<void(int)>> beforeWait_;   // beforeWaits
  void callBeforeWait(int device);
  uint64_t nextClique_ = 0;
};

}  // namespace kolo::device::host
