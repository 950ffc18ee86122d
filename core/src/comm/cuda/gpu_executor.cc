#include "comm/cuda/gpu_executor.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "comm/layout.h"
#include "kolo/error.h"

namespace kolo::comm::cuda {
namespace {

char* at(void* base, uint64_t elements, size_t elementBytes) {
  return static_cast<char*>(base) + elements * elementBytes;
}

bool isCopy(const device::CopyTransform& t) { return t.kind == device::CopyTransform::Kind::kCopy; }

// FenceProbe over the device runtime and the executor's collectives, for
// one device. It holds the collectives weakly: a handle that outlives the
// engine must not keep a communicator alive (its fence settled at shutdown
// anyway). A fence seen done is reported to the device's watcher through
// its relay (GpuExecutor's Relay, also held weakly).
template <typename Relay>
class DoneProbe final : public FenceProbe {
 public:
  DoneProbe(std::shared_ptr<device::Runtime> runtime,
            const std::shared_ptr<comm::Collectives>& collectives,
            const std::shared_ptr<Relay>& relay)
      : runtime_(std::move(runtime)), collectives_(collectives), relay_(relay) {}

  bool succeeded(void* doneEvent, uint64_t fence) noexcept override {
    try {
      // Throws on a device fault: the event is then never reached.
      if (!runtime_->reached(static_cast<device::Event>(doneEvent))) return false;
      // Only after the event was seen reached (gpu_ops.h).
      const std::shared_ptr<comm::Collectives> c = collectives_.lock();
      if (c == nullptr || !c->asyncError().ok()) return false;
    } catch (const std::exception&) {
      return false;
    }
    // The watcher runs the fence's callbacks without waiting for a host
    // function (there may be none yet: flushSignals), and without its
    // health check: the questions above are that check's (the device's
    // sticky fault makes reached() throw).
    if (const std::shared_ptr<Relay> r = relay_.lock()) r->reach(fence, /*checked=*/true);
    return true;
  }

 private:
  const std::shared_ptr<device::Runtime> runtime_;
  const std::weak_ptr<comm::Collectives> collectives_;
  const std::weak_ptr<Relay> relay_;
};

}  // namespace

GpuExecutor::GpuExecutor(std::shared_ptr<DeviceSet> devices,
                         std::unique_ptr<comm::Collectives> collectives, int rank, int size,
                         std::chrono::milliseconds timeout)
    : devices_(std::move(devices)),
      collectives_(std::move(collectives)),
      rank_(rank),
      size_(size),
      nativeAverage_(collectives_ != nullptr && std::strcmp(collectives_->name(), "nccl") == 0),
      timeout_(timeout) {
  KOLO_CHECK_ARG(devices_ != nullptr && collectives_ != nullptr, "gpu executor: missing backend");
  KOLO_CHECK_ARG(size >= 1 && rank >= 0 && rank < size,
                 "gpu executor: bad identity rank " + std::to_string(rank) + " of size " +
                     std::to_string(size));
  devices_->onStop([weak = std::weak_ptr<comm::Collectives>(collectives_)](const Status& why) {
    if (auto c = weak.lock()) c->abortWith(why);
  });
}

GpuExecutor::~GpuExecutor() {
  // Every fence gets its host function (a fence no waiter reported would
  // otherwise settle only at the timeout).
  flushSignals(std::chrono::steady_clock::time_point::max());
  // Let every fence settle (the watcher bounds this by the timeout and, on a
  // failure, aborts the communicator and drains the streams), then detach
  // the relays: a host function that still runs finds nothing to signal.
  const auto limit = timeout_ + std::chrono::seconds(5);
  for (auto& [device, w] : watchers_) {
    const bool settled = w.watcher->drainFor(limit);
    {
      std::lock_guard<std::mutex> lock(w.relay->mu);
      w.relay->watcher = nullptr;
    }
    if (!settled) {
      // Its thread is stuck in onFailure (a device that does not stop):
      // joining would hang the shutdown. It holds only shared state.
      (void)w.watcher.release();
      continue;
    }
    w.watcher.reset();
  }
  (void)devices_->drain();  // bounded; a wedged device's contexts are kept for good
  watchers_.clear();
}

GpuExecutor::Watched& GpuExecutor::watcher(int device) {
  auto it = watchers_.find(device);
  if (it != watchers_.end()) return it->second;
  CompletionWatcher::Options options;
  options.what = std::string("GPU work (") + collectives_->name() + ") on cuda:" +
                 std::to_string(device) + ", rank " + std::to_string(rank_) + " of " +
                 std::to_string(size_);
  options.timeout = timeout_;
  // The health check reads NCCL's asynchronous error and the device's
  // sticky fault (a faulted kernel stops the host functions, so without it
  // the fences would only time out). Host-side reads; the watcher thread
  // pins itself to the device first (no context on another GPU).
  options.check = [collectives = collectives_, devices = devices_, device] {
    devices->runtime().pinThread(device);
    Status s = devices->at(device).error();
    if (!s.ok()) return s;
    return collectives->asyncError();
  };
  // Before any failed callback releases a tensor: stop the collectives,
  // then wait until the comm streams are idle (a faulted device runs
  // nothing more; an aborted communicator's kernels exit).
  options.onFailure = [devices = devices_](const Status& why) { devices->stopAll(why); };
  Watched w;
  w.watcher = std::make_unique<CompletionWatcher>(options);
  w.relay = std::make_shared<Relay>();
  w.relay->watcher = w.watcher.get();
  w.probe = std::make_shared<DoneProbe<Relay>>(devices_->runtimePtr(), collectives_, w.relay);
  devices_->at(device).keepAlive(w.relay);
  return watchers_.emplace(device, std::move(w)).first->second;
}

void GpuExecutor::signalRelay(void* arg) {
  auto* relay = static_cast<Relay*>(arg);
  uint64_t fence;
  {
    std::lock_guard<std::mutex> lock(relay->mu);
    if (relay->covers.empty()) return;
    fence = relay->covers.front();
    relay->covers.pop_front();
  }
  relay->reach(fence, /*checked=*/false);
}

void GpuExecutor::cover(int device, Watched& w) noexcept {
  if (w.covered >= w.opened) return;
  if (w.watcher->reached() >= w.opened) {
    w.covered = w.opened;  // waiters reported them all: nothing to place
    return;
  }
  {
    std::lock_guard<std::mutex> lock(w.relay->mu);
    w.relay->covers.push_back(w.opened);  // before the launch: it may run at once
  }
  try {
    devices_->at(device).launchHostFunc(&GpuExecutor::signalRelay, w.relay.get());
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(w.relay->mu);
      w.relay->covers.pop_back();  // this thread's, pushed last
    }
    w.watcher->fail(statusFromException(e));
  }
  w.covered = w.opened;
}

void GpuExecutor::flushSignals(std::chrono::steady_clock::time_point openedBefore) noexcept {
  for (auto& [device, w] : watchers_) {
    if (w.covered < w.opened && w.uncoveredSince < openedBefore) cover(device, w);
  }
}

void GpuExecutor::beginResponse(int device, bool timed) {
  timing_.reset();
  if (timed) timing_ = std::make_shared<Timing>();
  mark(device, GpuPhases::kStart);
}

void GpuExecutor::mark(int device, GpuPhases::Phase phase) {
  if (timing_) timing_->events[phase] = devices_->at(device).record(/*timing=*/true);
}

GpuFence GpuExecutor::endResponse(int device) {
  DeviceContext& ctx = devices_->at(device);
  Watched& w = watcher(device);
  // A failure seen on the watcher ends the engine (the next response
  // throws here), so nothing queues behind an aborted communicator.
  w.watcher->failure().throwIfError();
  GpuFence fence;
  fence.device = device;
  fence.doneEvent = ctx.record();
  fence.stream = ctx.id();
  fence.sequence = ctx.recorded();
  fence.probe = w.probe;
  const bool timed = timing_ != nullptr;
  fence.timing = std::move(timing_);
  fence.id = w.watcher->open();
  if (w.covered == w.opened) w.uncoveredSince = std::chrono::steady_clock::now();
  w.opened = fence.id;
  // A timed response's host function anchors its phase times (whenDone):
  // right after it, not after later responses.
  if (timed) cover(device, w);
  return fence;
}

void GpuExecutor::whenDone(const GpuFence& fence, Done done) {
  const int device = fence.device;
  auto timing = std::static_pointer_cast<Timing>(fence.timing);
  watcher(device).watcher->then(
      fence.id, [devices = devices_, timing = std::move(timing), done = std::move(done)](
                    const Status& status, CompletionWatcher::Clock::time_point signalled) {
        GpuPhases phases;
        if (timing && status.ok()) {
          // The signal ran right after the last phase: anchor the device's
          // elapsed times there.
          device::Runtime& rt = devices->runtime();
          const int64_t end = std::chrono::duration_cast<std::chrono::microseconds>(
                                  signalled.time_since_epoch())
                                  .count();
          device::Event last = nullptr;
          for (int p = GpuPhases::kCount - 1; p >= 0 && last == nullptr; --p) {
            if (timing->events[p]) last = static_cast<device::Event>(timing->events[p].get());
          }
          phases.timed = true;
          int64_t previous = end;
          for (int p = 0; p < GpuPhases::kCount; ++p) {
            float ms = 0;
            if (timing->events[p] &&
                rt.elapsedMs(static_cast<device::Event>(timing->events[p].get()), last, &ms)) {
              previous = end - static_cast<int64_t>(ms * 1000.0f);
            }
            phases.at[p] = p == 0 ? previous : std::max(previous, phases.at[p - 1]);
          }
        }
        done(status, phases);
      });
}

void GpuExecutor::abort(const Status& why) {
  for (auto& [device, w] : watchers_) w.watcher->fail(why);
  devices_->stopAll(why);
}

void GpuExecutor::waitReady(int device, void* event) { devices_->at(device).waitEvent(event); }

bool GpuExecutor::captured(int device, void* event) {
  return devices_->at(device).captured(event);
}

GpuExecutor::Finish GpuExecutor::finishFor(DataType dtype, ReduceOp op, double postscale) const {
  const bool floating = isFloatingPoint(dtype);
  if (op != ReduceOp::kAverage) return {op, device::makeTransform(dtype, postscale)};
  // Integer average: an exact truncating division, or with a postscale one
  // multiply by postscale / size in float64 (as the CPU executor does).
  if (!floating && postscale == 1.0) return {ReduceOp::kSum, device::makeTransform(dtype, 1.0, size_)};
  if (!floating) return {ReduceOp::kSum, device::makeTransform(dtype, postscale / size_)};
  if (nativeAverage_) return {ReduceOp::kAverage, device::makeTransform(dtype, postscale)};
  return {ReduceOp::kSum, device::makeTransform(dtype, postscale / size_)};
}

void GpuExecutor::allreduce(int device, const std::vector<DeviceTensor>& tensors, DataType dtype,
                            ReduceOp op, double prescale, double postscale) {
  DeviceContext& ctx = devices_->at(device);
  const size_t es = elementSize(dtype);
  const device::CopyTransform pre = device::makeTransform(dtype, prescale);
  const Finish finish = finishFor(dtype, op, postscale);

  const bool inPlace = tensors.size() == 1 && tensors[0].input != nullptr;
  // A fused buffer holds tensor i at layout.offsets[i], each a multiple of
  // kGpuFusionAlignBytes, so every tensor (16-byte aligned itself, as any
  // caching allocator's) packs with vector loads; the collective runs over
  // layout.total elements, gaps included (every rank lays out the same).
  FusionLayout layout;
  if (inPlace) {
    layout.offsets = {0};
    layout.total = tensors[0].count;
  } else {
    std::vector<uint64_t> counts;
    counts.reserve(tensors.size());
    for (const DeviceTensor& t : tensors) counts.push_back(t.count);
    layout = fusionLayout(counts, es, kGpuFusionAlignBytes);
  }
  const uint64_t total = layout.total;
  void* buf;
  if (inPlace) {
    const DeviceTensor& t = tensors[0];
    buf = t.output;
    if (t.count > 0 && (t.input != t.output || !isCopy(pre))) {
      ctx.copy(t.input, t.output, t.count, dtype, pre);
    }
  } else {
    buf = ctx.fusion(total * es);
    std::vector<device::CopyDesc> pack;
    pack.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      pack.push_back(device::CopyDesc{tensors[i].input, at(buf, layout.offsets[i], es), tensors[i].count});
    }
    device::CopyTransform packTransform = pre;
    packTransform.fillBits = device::neutralBits(dtype, op);
    ctx.batchedCopy(pack, dtype, packTransform);
  }
  mark(device, GpuPhases::kPacked);

  collectives_->allreduce(buf, total, dtype, finish.backendOp);
  mark(device, GpuPhases::kReduced);

  if (inPlace) {
    if (!isCopy(finish.transform) && total > 0) {
      ctx.batchedCopy({device::CopyDesc{buf, buf, total}}, dtype, finish.transform);
    }
    mark(device, GpuPhases::kUnpacked);
    return;
  }
  std::vector<device::CopyDesc> unpack;
  unpack.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const DeviceTensor& t = tensors[i];
    if (t.input != nullptr) {
      unpack.push_back(device::CopyDesc{at(buf, layout.offsets[i], es), t.output, t.count});
    }
  }
  ctx.batchedCopy(unpack, dtype, finish.transform);
  mark(device, GpuPhases::kUnpacked);
}

void GpuExecutor::broadcast(int device, const DeviceTensor& tensor, DataType dtype, int root) {
  DeviceContext& ctx = devices_->at(device);
  const size_t es = elementSize(dtype);
  void* buf = tensor.output;
  if (buf == nullptr) buf = ctx.scratch(tensor.count * es);  // a joined rank
  if (rank_ == root && tensor.input != nullptr && tensor.input != buf && tensor.count > 0) {
    ctx.copy(tensor.input, buf, tensor.count, dtype, device::CopyTransform{});
  }
  collectives_->broadcast(buf, tensor.count, dtype, root);
  mark(device, GpuPhases::kReduced);
}

void GpuExecutor::allgatherv(int device, const void* in, void* out,
                             const std::vector<size_t>& counts, DataType dtype) {
  DeviceContext& ctx = devices_->at(device);  // the comm stream exists before the backend uses it
  if (out == nullptr) {  // a joined rank: receives into scratch
    size_t total = 0;
    for (size_t c : counts) total += c;
    out = ctx.scratch(total * elementSize(dtype));
  }
  collectives_->allgatherv(in, out, counts, dtype);
  mark(device, GpuPhases::kReduced);
}

void GpuExecutor::alltoallv(int device, const void* in, const std::vector<size_t>& sendCounts,
                            void* out, const std::vector<size_t>& recvCounts, DataType dtype) {
  DeviceContext& ctx = devices_->at(device);
  if (out == nullptr) {
    size_t total = 0;
    for (size_t c : recvCounts) total += c;
    out = ctx.scratch(total * elementSize(dtype));
  }
  collectives_->alltoallv(in, sendCounts, out, recvCounts, dtype);
  mark(device, GpuPhases::kReduced);
}

void GpuExecutor::reducescatter(int device, const void* in, void* out,
                                const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                                double prescale, double postscale) {
  DeviceContext& ctx = devices_->at(device);
  const size_t es = elementSize(dtype);
  const device::CopyTransform pre = device::makeTransform(dtype, prescale);
  const Finish finish = finishFor(dtype, op, postscale);
  uint64_t total = 0;
  for (size_t c : counts) total += c;
  const uint64_t mine = counts.at(static_cast<size_t>(rank_));
  if (in == nullptr) {
    // A joined rank contributes the identity of op and drops its share.
    void* neutral = ctx.fusion(total * es);
    device::CopyTransform fill;
    fill.fillBits = device::neutralBits(dtype, op);
    if (total > 0) ctx.batchedCopy({device::CopyDesc{nullptr, neutral, total}}, dtype, fill);
    in = neutral;
    out = ctx.scratch(mine * es);
  } else if (!isCopy(pre) && total > 0) {
    void* scaled = ctx.scratch(total * es);
    ctx.batchedCopy({device::CopyDesc{in, scaled, total}}, dtype, pre);
    in = scaled;
  }
  collectives_->reducescatter(in, out, counts, dtype, finish.backendOp);
  mark(device, GpuPhases::kReduced);
  if (!isCopy(finish.transform) && mine > 0) {
    ctx.batchedCopy({device::CopyDesc{out, out, mine}}, dtype, finish.transform);
  }
}

}  // namespace kolo::comm::cuda
