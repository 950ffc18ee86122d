#include "comm/cuda/device_set.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>

#include "device/memory_policy.h"
#include "common/bounded_call.h"
#include "kolo/error.h"

namespace kolo::comm::cuda {

std::shared_ptr<EventPool> EventPool::create(std::shared_ptr<device::Runtime> runtime, int device,
                                             bool timing) {
  return std::shared_ptr<EventPool>(new EventPool(std::move(runtime), device, timing));
}

EventPool::~EventPool() {
  for (device::Event e : free_) runtime_->destroyEvent(e);
}

std::shared_ptr<void> EventPool::take() {
  device::Event event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      event = free_.back();
      free_.pop_back();
    }
  }
  if (event == nullptr) event = runtime_->createEvent(device_, timing_);
  return std::shared_ptr<void>(static_cast<void*>(event), [pool = shared_from_this()](void* e) {
    pool->give(static_cast<device::Event>(e));
  });
}

void EventPool::give(device::Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(event);
}

namespace {
std::atomic<uint64_t> gContexts{0};  // DeviceContext::id()
}  // namespace

DeviceContext::DeviceContext(std::shared_ptr<device::Runtime> runtime, int device)
    : runtime_(std::move(runtime)), device_(device), id_(++gContexts) {
  KOLO_CHECK_ARG(device >= 0, "device index " + std::to_string(device) + " is negative");
  runtime_->pinThread(device);
  stream_ = runtime_->createStream(device);
  doneEvents_ = EventPool::create(runtime_, device, false);
  timingEvents_ = EventPool::create(runtime_, device, true);
}

DeviceContext::~DeviceContext() {
  // destroyStream waits for the stream's work: nothing uses the buffers then.
  runtime_->destroyStream(stream_);
  freeRetired(/*all=*/true);
  if (fusion_.data != nullptr) runtime_->freeDevice(fusion_.data);
  if (scratch_.data != nullptr) runtime_->freeDevice(scratch_.data);
  if (staging_.data != nullptr) runtime_->freePinned(staging_.data);
}

void* DeviceContext::grow(Buffer& buffer, size_t bytes, bool pinned) {
  if (bytes <= buffer.capacity && buffer.data != nullptr) return buffer.data;
  const size_t next = device::grownCapacity(buffer.capacity, std::max<size_t>(bytes, 1));
  freeRetired(/*all=*/false);
  if (buffer.data != nullptr) {
    // Work queued on the stream may still read or write the old block: it
    // goes once the stream passed that work. Waiting for it here would
    // hold the loop thread behind whatever the stream waits for (a peer's
    // collective, a producer's kernel) and hide a peer's failure from it.
    retired_.push_back(Retired{buffer.data, pinned, record()});
    buffer.data = nullptr;
    buffer.capacity = 0;
  }
  buffer.data = pinned ? runtime_->allocPinned(next) : runtime_->allocDevice(device_, next);
  buffer.capacity = next;
  return buffer.data;
}

void DeviceContext::batchedCopy(const std::vector<device::CopyDesc>& copies, DataType dtype,
                                const device::CopyTransform& transform) {
  bool any = false;
  for (const device::CopyDesc& c : copies) any = any || c.count > 0;
  if (any) runtime_->pack(copies, dtype, transform, stream_);
}

void DeviceContext::copy(const void* src, void* dst, uint64_t count, DataType dtype,
                         const device::CopyTransform& transform) {
  if (count == 0) return;
  if (transform.kind != device::CopyTransform::Kind::kCopy || src == nullptr) {
    batchedCopy({device::CopyDesc{src, dst, count}}, dtype, transform);
    return;
  }
  if (src == dst) return;
  runtime_->copy(dst, src, count * elementSize(dtype), device::CopyKind::kDeviceToDevice,
                 stream_);
}

void DeviceContext::copyAsync(void* dst, const void* src, size_t bytes, device::CopyKind kind) {
  if (bytes > 0) runtime_->copy(dst, src, bytes, kind, stream_);
}

void DeviceContext::waitEvent(void* event) {
  runtime_->wait(stream_, static_cast<device::Event>(event));
}

bool DeviceContext::captured(void* event) {
  return runtime_->captured(static_cast<device::Event>(event));
}

std::shared_ptr<void> DeviceContext::record(bool timing) {
  std::shared_ptr<void> event = (timing ? timingEvents_ : doneEvents_)->take();
  runtime_->record(static_cast<device::Event>(event.get()), stream_);
  ++recorded_;
  return event;
}

void DeviceContext::launchHostFunc(void (*fn)(void*), void* arg) {
  runtime_->hostFunc(stream_, fn, arg);
}

void DeviceContext::freeRetired(bool all) noexcept {
  auto keep = retired_.begin();
  for (Retired& r : retired_) {
    bool done = all;
    if (!done) {
      try {
        done = runtime_->reached(static_cast<device::Event>(r.done.get()));
      } catch (const std::exception&) {
        done = false;  // a fault: the context's end frees it, or keeps it
      }
    }
    if (done) {
      r.pinned ? runtime_->freePinned(r.data) : runtime_->freeDevice(r.data);
    } else {
      *keep++ = std::move(r);
    }
  }
  retired_.erase(keep, retired_.end());
}

void DeviceContext::bound(std::chrono::milliseconds limit, std::function<Status()> interrupt) {
  limit_ = limit;
  interrupt_ = std::move(interrupt);
}

void DeviceContext::synchronize() {
  if (limit_.count() <= 0 && !interrupt_) {
    runtime_->synchronize(stream_);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  while (!runtime_->settleFor(stream_, kInterruptPoll)) {
    if (interrupt_) {
      const Status why = interrupt_();
      if (!why.ok()) {
        throw PeerFailure("gave up waiting for cuda:" + std::to_string(device_) +
                          "'s comm stream: " + why.message);
      }
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    if (limit_.count() > 0 && waited > limit_) {
      throw Timeout("cuda:" + std::to_string(device_) + "'s comm stream did not finish its work " +
                    "within " + std::to_string(limit_.count()) +
                    " ms (KOLO_TIMEOUT): a kernel before kolo's work, or kolo's own, does not "
                    "end");
    }
  }
  runtime_->synchronize(stream_);  // idle or faulted: returns at once, throws a fault
}

DeviceSet::DeviceSet(std::shared_ptr<device::Runtime> runtime,
                     std::chrono::milliseconds drainLimit)
    : runtime_(runtime ? std::move(runtime) : device::cudaRuntime()), drainLimit_(drainLimit) {
  KOLO_CHECK_ARG(runtime_ != nullptr,
                 "this build of kolo has no CUDA runtime; GPU work needs KOLO_WITH_CUDA=ON");
}

DeviceSet::~DeviceSet() {
  if (!wedged()) return;  // the contexts' destructors wait for idle streams
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [device, ctx] : contexts_) {
    keepForever(std::shared_ptr<DeviceContext>(std::move(ctx)));
  }
}

DeviceContext& DeviceSet::at(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = contexts_.find(device);
  if (it == contexts_.end()) {
    it = contexts_.emplace(device, std::make_unique<DeviceContext>(runtime_, device)).first;
    it->second->bound(limit_, [this] { return interrupted(); });
  }
  return *it->second;
}

void DeviceSet::pin(int device, const std::string& what) {
  if (pinned_ < 0) {
    pinned_ = device;
    return;
  }
  if (device == pinned_) return;
  throw InvalidArgument(
      what + " is on cuda:" + std::to_string(device) + " but this rank works on cuda:" +
      std::to_string(pinned_) +
      " (its first CUDA tensor was there); kolo drives one GPU per rank. Put every tensor of "
      "a rank on the same GPU: in Python call torch.cuda.set_device(hvd.local_rank()) before "
      "creating tensors, in C++ c10::cuda::set_device(local_rank)");
}

bool DeviceSet::drain() noexcept {
  // Once wedged, always: what the device was given stays kept, and a second
  // failure path (watcher, then the engine's) does not wait again.
  if (wedged()) return false;
  std::vector<DeviceContext*> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [device, ctx] : contexts_) all.push_back(ctx.get());
  }
  const auto deadline = std::chrono::steady_clock::now() + drainLimit_;
  bool idle = true;
  for (DeviceContext* ctx : all) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (!runtime_->settleFor(ctx->stream(), std::max(left, std::chrono::milliseconds(0)))) {
      idle = false;
    }
  }
  if (!idle) wedged_.store(true, std::memory_order_release);
  return idle;
}

void DeviceSet::onStop(std::function<void(const Status&)> abort) {
  std::lock_guard<std::mutex> lock(mu_);
  stops_.push_back(std::move(abort));
}

void DeviceSet::bound(std::chrono::milliseconds limit, std::function<Status()> interrupt) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_ = limit;
  interrupt_ = std::move(interrupt);
}

Status DeviceSet::interrupted() const {
  std::function<Status()> interrupt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_.ok()) return stopped_;
    interrupt = interrupt_;
  }
  if (!interrupt) return Status::Ok();
  try {
    return interrupt();
  } catch (const std::exception&) {
    return Status::Ok();  // a check that failed is no reason to give up
  }
}

void DeviceSet::stopAll(const Status& why) noexcept {
  std::vector<std::function<void(const Status&)>> stops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stops = stops_;
    if (stopped_.ok()) stopped_ = why.ok() ? Status{ErrorCode::kPeerFailure, "stopped"} : why;
  }
  for (auto& stop : stops) {
    try {
      stop(why);
    } catch (const std::exception&) {
      // Aborting is best effort; the drain below is what counts.
    }
  }
  (void)drain();  // a device that does not stop is wedged() from now on
}

}  // namespace kolo::comm::cuda
