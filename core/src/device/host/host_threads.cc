// HostRuntime: what CUDA keeps per thread (the current device once pinned,
// the stream capture mode), the rule that a call from the wrong thread
// breaks a capture, and the count of runtime calls by method and thread.
#include <cstdint>
#include <map>
#include <string>
#include <thread>

#include "device/host/host_runtime.h"
#include "device/host/host_runtime_parts.h"

namespace kolo::device::host {

namespace {

// What CUDA keeps per thread: its current device (once pinned) and its
// capture mode, per runtime.
struct ThreadState {
  std::map<uint64_t, int> pinned;
  std::map<uint64_t, uint8_t> modes;  // CaptureMode; absent: kGlobal
  std::map<uint64_t, uint64_t> calls;  // callsOnThisThread
};
thread_local ThreadState tThread;

}  // namespace

HostRuntime::CallerSafe::CallerSafe(HostRuntime& rt) : rt_(rt) {
  if (tThread.pinned.count(rt_.id_) == 0 && rt_.modeLocked() == CaptureMode::kGlobal) {
    tThread.modes[rt_.id_] = static_cast<uint8_t>(CaptureMode::kThreadLocal);
    switched_ = true;
  }
}

HostRuntime::CallerSafe::~CallerSafe() {
  if (switched_) tThread.modes.erase(rt_.id_);
}

void HostRuntime::pinThread(int device) {
  checkDevice(device);
  auto [it, fresh] = tThread.pinned.emplace(id_, device);
  if (fresh) {
    // As CudaRuntime: only the first pin calls CUDA (cudaSetDevice and the
    // capture mode); a pinned thread's later pins cost nothing.
    countCall(Method::kPinThread);
    if (modeLocked() == CaptureMode::kGlobal) {
      tThread.modes[id_] = static_cast<uint8_t>(CaptureMode::kThreadLocal);
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++pinCount_[device];
    return;
  }
  if (it->second != device) {
    throw Internal("host runtime: this thread works on device " + std::to_string(it->second) +
                   " and was asked to switch to device " + std::to_string(device));
  }
}

HostRuntime::CaptureMode HostRuntime::modeLocked() const {
  auto it = tThread.modes.find(id_);
  return it == tThread.modes.end() ? CaptureMode::kGlobal : static_cast<CaptureMode>(it->second);
}

HostRuntime::CaptureMode HostRuntime::exchangeCaptureMode(CaptureMode mode) {
  const CaptureMode old = modeLocked();
  if (mode == CaptureMode::kGlobal) {
    tThread.modes.erase(id_);
  } else {
    tThread.modes[id_] = static_cast<uint8_t>(mode);
  }
  return old;
}

void HostRuntime::unsafeCallLocked(const char* what, bool mayThrow) {
  const CaptureMode mine = modeLocked();
  if (mine == CaptureMode::kRelaxed) return;
  const auto me = std::this_thread::get_id();
  bool broke = false;
  for (const auto& s : streams_) {
    if (!s->capturing) continue;
    const bool prohibited = s->captureOwner == me
                                ? s->captureMode != CaptureMode::kRelaxed
                                : mine == CaptureMode::kGlobal &&
                                      s->captureMode == CaptureMode::kGlobal;
    if (!prohibited) continue;
    if (s->invalidatedBy.empty()) s->invalidatedBy = what;
    broke = true;
  }
  if (broke && mayThrow) {
    throw Internal(std::string("host runtime: ") + what +
                   ": operation not permitted when stream is capturing (a thread in global "
                   "capture mode while another captures a graph); the capture is invalidated");
  }
}

void HostRuntime::beginCapture(Stream stream, CaptureMode mode) {
  std::lock_guard<std::mutex> lock(mu_);
  HostStream& s = streamOf(stream);
  s.capturing = true;
  s.captureMode = mode;
  s.captureOwner = std::this_thread::get_id();
  s.invalidatedBy.clear();
}

bool HostRuntime::endCapture(Stream stream, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  HostStream& s = streamOf(stream);
  s.capturing = false;
  if (why != nullptr) *why = s.invalidatedBy;
  const bool valid = s.invalidatedBy.empty();
  s.invalidatedBy.clear();
  return valid;
}

void HostRuntime::countCall(Method method) const {
  auto& counts = currentDevice() >= 0 ? pinnedCalls_ : unpinnedCalls_;
  counts[static_cast<size_t>(method)].fetch_add(1, std::memory_order_relaxed);
  ++tThread.calls[id_];
}

uint64_t HostRuntime::callsOnThisThread() const {
  auto it = tThread.calls.find(id_);
  return it == tThread.calls.end() ? 0 : it->second;
}

HostRuntime::Calls HostRuntime::calls() const {
  Calls c;
  for (size_t m = 0; m < kMethods; ++m) {
    c.pinnedBy[m] = pinnedCalls_[m].load(std::memory_order_relaxed);
    c.unpinnedBy[m] = unpinnedCalls_[m].load(std::memory_order_relaxed);
    c.pinned += c.pinnedBy[m];
    c.unpinned += c.unpinnedBy[m];
  }
  return c;
}

const char* HostRuntime::methodName(Method method) {
  // In Method's order.
  static constexpr const char* kNames[kMethods] = {
      "pinThread",    "deviceOf",    "deviceCount", "allocDevice",   "freeDevice",
      "allocPinned",  "freePinned",  "createStream", "destroyStream", "createEvent",
      "destroyEvent", "record",      "wait",        "reached",       "captured",
      "elapsedMs",    "hostFunc",    "copy",        "pack",          "synchronize",
      "settleFor",    "streamError"};
  const auto m = static_cast<size_t>(method);
  return m < kMethods ? kNames[m] : "?";
}

int HostRuntime::currentDevice() const {
  auto it = tThread.pinned.find(id_);
  return it == tThread.pinned.end() ? -1 : it->second;
}

int HostRuntime::threadsPinnedTo(int device) const {
  checkDevice(device);
  std::lock_guard<std::mutex> lock(mu_);
  return pinCount_[device];
}

}  // namespace kolo::device::host
