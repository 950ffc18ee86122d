// HostRuntime's host functions: each runs on its device's callback thread
// while its stream waits, as CUDA runs them on a driver thread; and the
// tests' hooks before host functions and waits.
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "common/thread_name.h"
#include "device/host/host_runtime.h"
#include "device/host/host_runtime_parts.h"

namespace kolo::device::host {

void HostRuntime::hostFunc(Stream stream, void (*fn)(void*), void* arg) {
  countCall(Method::kHostFunc);
  std::shared_ptr<const std::function<void()>> before;
  {
    std::lock_guard<std::mutex> lock(mu_);
    before = beforeHostFunc_;
  }
  const int device = streamOf(stream).device;
  enqueue(stream, Stage::kHostFunc, [this, device, fn, arg, before] {
    // As CUDA: fn runs on the device's callback thread, and this stream
    // holds until it returned.
    struct Call {
      bool done = false;
      std::condition_variable returned;
    };
    auto call = std::make_shared<Call>();
    std::unique_lock<std::mutex> lock(mu_);
    callBackLocked(device, [this, call, fn, arg, before] {
      if (before) (*before)();
      fn(arg);
      std::lock_guard<std::mutex> lock(mu_);
      call->done = true;
      call->returned.notify_all();
    });
    call->returned.wait(lock, [&] { return call->done; });
  });
}

void HostRuntime::callBackLocked(int device, std::function<void()> call) {
  std::unique_ptr<Callbacks>& c = callbacks_[static_cast<size_t>(device)];
  if (!c) {
    c = std::make_unique<Callbacks>();
    c->thread = std::thread([this, raw = c.get()] {
      nameThisThread("host-callback");
      runCallbacks(raw);
    });
  }
  c->queue.push_back(std::move(call));
  c->work.notify_one();
}

void HostRuntime::runCallbacks(Callbacks* c) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    c->work.wait(lock, [&] { return c->stop || !c->queue.empty(); });
    if (c->queue.empty()) return;  // stopping, nothing left
    std::function<void()> call = std::move(c->queue.front());
    c->queue.pop_front();
    lock.unlock();
    call();
    lock.lock();
  }
}

void HostRuntime::beforeHostFunctions(std::function<void()> before) {
  auto hook = before ? std::make_shared<const std::function<void()>>(std::move(before)) : nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  beforeHostFunc_ = std::move(hook);
}

void HostRuntime::beforeWaits(std::function<void(int device)> hook) {
  auto h = hook ? std::make_shared<const std::function<void(int)>>(std::move(hook)) : nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  beforeWait_ = std::move(h);
}

void HostRuntime::callBeforeWait(int device) {
  std::shared_ptr<const std::function<void(int)>> hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hook = beforeWait_;
  }
  if (hook) (*hook)(device);
}

}  // namespace kolo::device::host
