// HostRuntime's memory, streams, events and waits. What CUDA keeps per
// thread (its device, its capture mode) and the call counts are in
// host_threads.cc; host functions and their callback threads in
// host_callbacks.cc.
#include "device/host/host_runtime.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/thread_name.h"
#include "device/host/clique.h"
#include "device/host/device_turns.h"
#include "device/host/host_runtime_parts.h"
#include "kernels/reduce.h"

namespace kolo::device::host {

using Clock = std::chrono::steady_clock;

namespace {

std::atomic<uint64_t> gRuntimes{0};  // HostRuntime::id_

}  // namespace

// An event handle owns one reference to its state; queued records and
// waits hold their own, so destroying an event with work queued on it is
// fine (as in CUDA).
struct HostRuntime::HostEvent {
  int device = 0;
  bool timing = false;
  uint64_t recorded = 0;   // records enqueued
  uint64_t completed = 0;  // records the stream got to
  bool captured = false;   // the last record was on a capturing stream
  Clock::time_point at{};  // when the last record completed
};

HostRuntime::HostRuntime(int devices)
    : devices_(devices),
      faults_(static_cast<size_t>(devices)),
      id_(++gRuntimes),
      pinCount_(devices, 0) {
  KOLO_CHECK_ARG(devices >= 1, "host runtime: needs at least one device");
  callbacks_.resize(static_cast<size_t>(devices));
  turns_ = std::make_unique<DeviceTurns>(devices);
}

HostRuntime::~HostRuntime() {
  std::vector<std::unique_ptr<HostStream>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams.swap(streams_);
    for (auto& s : streams) s->stop = true;
  }
  changed_.notify_all();
  for (auto& s : streams) s->work.notify_all();
  for (auto& s : streams) s->thread.join();
  // After the streams: their last host functions run here.
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : callbacks_) {
      if (c) c->stop = true;
    }
  }
  for (auto& c : callbacks_) {
    if (!c) continue;
    c->work.notify_all();
    c->thread.join();
  }
  for (auto& [start, block] : allocations_) std::free(reinterpret_cast<void*>(start));
}

void HostRuntime::checkDevice(int device) const {
  if (device < 0 || device >= devices_) {
    throw Internal("host runtime: device " + std::to_string(device) + " does not exist (" +
                   std::to_string(devices_) + " devices)");
  }
}

HostRuntime::HostStream& HostRuntime::streamOf(Stream stream) const {
  KOLO_ENFORCE(stream != nullptr, "host runtime: null stream");
  return *reinterpret_cast<HostStream*>(stream);
}

std::shared_ptr<HostRuntime::HostEvent> HostRuntime::eventOf(Event event) const {
  KOLO_ENFORCE(event != nullptr, "host runtime: null event");
  return *reinterpret_cast<std::shared_ptr<HostEvent>*>(event);
}

int HostRuntime::deviceOf(const void* ptr) {
  countCall(Method::kDeviceOf);
  return ownerOf(ptr);
}

int HostRuntime::ownerOf(const void* ptr) const {
  if (ptr == nullptr) return -1;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.upper_bound(p);
  if (it == allocations_.begin()) return -1;
  --it;
  return p < it->first + std::max<size_t>(it->second.first, 1) ? it->second.second : -1;
}

void* HostRuntime::allocDevice(int device, size_t bytes) {
  countCall(Method::kAllocDevice);
  checkDevice(device);
  {
    std::lock_guard<std::mutex> lock(mu_);
    unsafeCallLocked("cudaMalloc", true);
  }
  void* p = std::calloc(std::max<size_t>(bytes, 1), 1);
  if (p == nullptr) throw Internal("host runtime: out of memory");
  std::lock_guard<std::mutex> lock(mu_);
  allocations_[reinterpret_cast<uintptr_t>(p)] = {bytes, device};
  return p;
}

void HostRuntime::freeDevice(void* ptr) noexcept {
  countCall(Method::kFreeDevice);
  if (ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    unsafeCallLocked("cudaFree", false);
    allocations_.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  std::free(ptr);
}

void* HostRuntime::allocPinned(size_t bytes) {
  countCall(Method::kAllocPinned);
  {
    std::lock_guard<std::mutex> lock(mu_);
    unsafeCallLocked("cudaHostAlloc", true);
  }
  void* p = std::calloc(std::max<size_t>(bytes, 1), 1);
  if (p == nullptr) throw Internal("host runtime: out of pinned memory");
  return p;
}

void HostRuntime::freePinned(void* ptr) noexcept {
  countCall(Method::kFreePinned);
  if (ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    unsafeCallLocked("cudaFreeHost", false);
  }
  std::free(ptr);
}

Stream HostRuntime::createStream(int device) {
  countCall(Method::kCreateStream);
  checkDevice(device);
  auto s = std::make_unique<HostStream>();
  s->device = device;
  HostStream* raw = s.get();
  std::lock_guard<std::mutex> lock(mu_);  // the worker starts once this is released
  unsafeCallLocked("cudaStreamCreate", true);
  raw->thread = std::thread([this, raw] {
    nameThisThread("host-stream");  // the device's stand-in, apart from kolo's threads
    runStream(raw);
  });
  streams_.push_back(std::move(s));
  return reinterpret_cast<Stream>(raw);
}

void HostRuntime::destroyStream(Stream stream) noexcept {
  countCall(Method::kDestroyStream);
  if (stream == nullptr) return;
  HostStream* s = &streamOf(stream);
  std::unique_ptr<HostStream> owned;
  {
    std::unique_lock<std::mutex> lock(mu_);
    unsafeCallLocked("cudaStreamSynchronize", false);
    changed_.wait(lock, [&] { return s->tasks.empty() && !s->busy; });
    s->stop = true;
    auto it = std::find_if(streams_.begin(), streams_.end(),
                           [&](const auto& p) { return p.get() == s; });
    if (it != streams_.end()) {
      owned = std::move(*it);
      streams_.erase(it);
    }
  }
  changed_.notify_all();
  s->work.notify_all();
  if (owned) owned->thread.join();
}

Event HostRuntime::createEvent(int device, bool timing) {
  countCall(Method::kCreateEvent);
  checkDevice(device);
  auto e = std::make_shared<HostEvent>();
  e->device = device;
  e->timing = timing;
  return reinterpret_cast<Event>(new std::shared_ptr<HostEvent>(std::move(e)));
}

void HostRuntime::destroyEvent(Event event) noexcept {
  countCall(Method::kDestroyEvent);
  delete reinterpret_cast<std::shared_ptr<HostEvent>*>(event);
}

void HostRuntime::faultLocked(int device, const std::string& message) {
  if (faults_[device].ok()) {
    faults_[device] = Status{ErrorCode::kInternal, "host device " + std::to_string(device) +
                                                       ": " + message};
  }
  changed_.notify_all();
}

void HostRuntime::faultAt(int device, Stage stage, int nth, const std::string& message) {
  checkDevice(device);
  KOLO_CHECK_ARG(nth >= 1, "host runtime: faultAt counts from 1");
  std::lock_guard<std::mutex> lock(mu_);
  injections_[{device, stage}] = Injection{nth, message};
}

Status HostRuntime::deviceError(int device) const {
  checkDevice(device);
  std::lock_guard<std::mutex> lock(mu_);
  return faults_[device];
}

void HostRuntime::enqueue(Stream stream, Stage stage, std::function<void()> fn) {
  HostStream& s = streamOf(stream);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Task task{stage, std::move(fn), {}};
    auto it = injections_.find({s.device, stage});
    if (it != injections_.end() && --it->second.countdown == 0) {
      task.fault = it->second.message;
      injections_.erase(it);
    }
    s.tasks.push_back(std::move(task));
  }
  s.work.notify_one();
}

void HostRuntime::runStream(HostStream* s) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    s->work.wait(lock, [&] { return s->stop || !s->tasks.empty(); });
    if (s->tasks.empty()) return;  // stopping, nothing left
    Task task = std::move(s->tasks.front());
    s->tasks.pop_front();
    if (!faults_[s->device].ok()) {
      // A faulted device runs nothing more: its queue only drains.
      if (s->tasks.empty()) changed_.notify_all();
      continue;
    }
    if (!task.fault.empty()) {
      faultLocked(s->device, task.fault);
      continue;
    }
    s->busy = true;
    s->running = task.stage;
    lock.unlock();
    task.fn();  // never throws: tasks catch what they report elsewhere
    lock.lock();
    s->busy = false;
    s->running = Stage::kCount;
    changed_.notify_all();
  }
}

void HostRuntime::record(Event event, Stream stream) {
  countCall(Method::kRecord);
  std::shared_ptr<HostEvent> e = eventOf(event);
  HostStream& s = streamOf(stream);
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = ++e->recorded;
    e->captured = s.capturing;
  }
  enqueue(stream, Stage::kCount, [this, e, n] {
    std::lock_guard<std::mutex> lock(mu_);
    e->completed = std::max(e->completed, n);
    e->at = Clock::now();
    changed_.notify_all();
  });
}

void HostRuntime::wait(Stream stream, Event event) {
  countCall(Method::kWait);
  std::shared_ptr<HostEvent> e = eventOf(event);
  HostStream& s = streamOf(stream);
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(mu_);
    target = e->recorded;  // the record in force now, as cudaStreamWaitEvent
  }
  if (target == 0) return;
  enqueue(stream, Stage::kCount, [this, e, &s, target] {
    std::unique_lock<std::mutex> lock(mu_);
    // A fault on either device ends the wait: nothing behind it runs then.
    s.waiting = true;
    changed_.wait(lock, [&] {
      return e->completed >= target || s.stop || !faults_[e->device].ok() ||
             !faults_[s.device].ok();
    });
    s.waiting = false;
  });
}

bool HostRuntime::reached(Event event) {
  countCall(Method::kReached);
  std::shared_ptr<HostEvent> e = eventOf(event);
  CallerSafe safe(*this);
  std::lock_guard<std::mutex> lock(mu_);
  unsafeCallLocked("cudaEventQuery", true);
  if (!faults_[e->device].ok()) throw Internal(faults_[e->device].message);
  return e->completed >= e->recorded;
}

bool HostRuntime::captured(Event event) {
  countCall(Method::kCaptured);
  std::shared_ptr<HostEvent> e = eventOf(event);
  std::lock_guard<std::mutex> lock(mu_);
  return e->captured;
}

bool HostRuntime::elapsedMs(Event from, Event to, float* ms) noexcept {
  countCall(Method::kElapsedMs);
  const HostEvent& a = *eventOf(from);
  const HostEvent& b = *eventOf(to);
  std::lock_guard<std::mutex> lock(mu_);
  if (!a.timing || !b.timing || a.completed == 0 || b.completed == 0) return false;
  *ms = std::chrono::duration<float, std::milli>(b.at - a.at).count();
  return true;
}

void HostRuntime::copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream stream) {
  countCall(Method::kCopy);
  (void)kind;
  if (bytes == 0) return;
  enqueue(stream, Stage::kCopy, [dst, src, bytes] { std::memmove(dst, src, bytes); });
}

void HostRuntime::pack(const std::vector<device::CopyDesc>& copies, DataType dtype,
                       const device::CopyTransform& transform, Stream stream) {
  countCall(Method::kPack);
  using Kind = device::CopyTransform::Kind;
  // The CUDA runtime's plan, checked at the call as there, and run launch
  // by launch, chunk by chunk, each chunk found as the kernel's blocks find
  // theirs: the orchestration tests run the plan's split and lookup.
  auto plan = std::make_shared<const device::CopyPlan>(
      device::planCopies(copies, elementSize(dtype)));
  if (plan->chunks == 0) return;
  enqueue(stream, Stage::kPack, [plan, dtype, transform] {
    const size_t es = elementSize(dtype);
    for (const device::CopyLaunch& l : plan->launches) {
      const device::DeviceCopyDesc* descs = plan->descs.data() + l.firstDesc;
      uint32_t i = 0;
      for (uint64_t chunk = 0; chunk < l.chunks; ++chunk) {
        i = device::descOfChunk(descs, i, l.numDescs, chunk);
        const device::DeviceCopyDesc& d = descs[i];
        const uint64_t begin = (chunk - d.firstChunk) * plan->chunkElements;
        const uint64_t n = std::min(plan->chunkElements, d.count - begin);
        char* dst = static_cast<char*>(d.dst) + begin * es;
        if (d.src == nullptr) {
          for (uint64_t k = 0; k < n; ++k) std::memcpy(dst + k * es, &transform.fillBits, es);
          continue;
        }
        const char* src = static_cast<const char*>(d.src) + begin * es;
        if (src != dst) std::memmove(dst, src, n * es);
        if (transform.kind == Kind::kScale) scaleElements(dst, n, dtype, transform.scale);
        if (transform.kind == Kind::kDivide) divideElements(dst, n, dtype, transform.divisor);
      }
    }
  });
}

void HostRuntime::launch(Stream stream, Stage stage, std::function<void()> fn) {
  enqueue(stream, stage, std::move(fn));
}

void HostRuntime::synchronize(Stream stream) {
  countCall(Method::kSynchronize);
  HostStream& s = streamOf(stream);
  callBeforeWait(s.device);
  std::unique_lock<std::mutex> lock(mu_);
  unsafeCallLocked("cudaStreamSynchronize", true);
  changed_.wait(lock, [&] { return (s.tasks.empty() && !s.busy) || s.stop; });
  if (!faults_[s.device].ok()) throw Internal(faults_[s.device].message);
}

bool HostRuntime::settleFor(Stream stream, std::chrono::milliseconds limit) noexcept {
  countCall(Method::kSettleFor);
  HostStream& s = streamOf(stream);
  try {
    callBeforeWait(s.device);
  } catch (...) {
  }
  CallerSafe safe(*this);
  std::unique_lock<std::mutex> lock(mu_);
  unsafeCallLocked("cudaStreamQuery", false);
  // A faulted device's queue only drains (enqueue), so idle covers it too;
  // a task that never returns (a collective waiting for a peer) keeps busy.
  return changed_.wait_for(lock, limit, [&] { return (s.tasks.empty() && !s.busy) || s.stop; });
}

Status HostRuntime::streamError(Stream stream) noexcept {
  countCall(Method::kStreamError);
  HostStream& s = streamOf(stream);
  CallerSafe safe(*this);
  std::lock_guard<std::mutex> lock(mu_);
  unsafeCallLocked("cudaStreamQuery", false);
  return faults_[s.device];
}

bool HostRuntime::idle(int device) const {
  checkDevice(device);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& s : streams_) {
    if (s->device == device && (!s->tasks.empty() || s->busy)) return false;
  }
  return true;
}

bool HostRuntime::settled(int device) const {
  checkDevice(device);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& s : streams_) {
    if (s->device != device) continue;
    const bool idle = !s->busy && s->tasks.empty();
    const bool blocked = s->busy && (s->waiting || s->running == Stage::kCollective);
    if (!idle && !blocked) return false;
  }
  return true;
}

uint64_t HostRuntime::collectiveOn(int device) const {
  checkDevice(device);
  return turns_->holder(device);
}

std::shared_ptr<Clique> HostRuntime::clique(uint64_t id, int size) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = cliques_[id];
  std::shared_ptr<Clique> c = slot.lock();
  if (!c) {
    c = std::make_shared<Clique>(size, id, turns_.get());
    slot = c;
  }
  KOLO_ENFORCE(c->size() == size, "host runtime: clique " + std::to_string(id) + " has " +
                                      std::to_string(c->size()) + " members, not " +
                                      std::to_string(size));
  return c;
}

uint64_t HostRuntime::newCliqueId() {
  std::lock_guard<std::mutex> lock(mu_);
  return ++nextClique_;
}

}  // namespace kolo::device::host
