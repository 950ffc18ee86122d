// Helpers of the GPU orchestration tests (gpu_orchestration_test.cc,
// gpu_defects_test.cc): real engines over the host device runtime
// (device/host), ranks as threads. Every wait is bounded.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <utility>

#include "device/host/host_runtime.h"
#include "harness/harness.h"
#include "kolo/engine.h"

namespace kolo::gpu_test {

using namespace std::chrono_literals;
using device::host::HostRuntime;
using Stage = HostRuntime::Stage;

constexpr auto kLimit = 30s;  // a handle that takes longer counts as hung

inline Config gpuConfig(const std::shared_ptr<HostRuntime>& rt,
                 std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  Config c = test::testConfig();
  c.deviceRuntime = rt;
  c.gpuOperations = "nccl";  // the host runtime's device collectives
  c.timeout = timeout;
  return c;
}

// n floats of device memory of the host runtime, freed with the object.
struct DeviceFloats {
  DeviceFloats(HostRuntime& rt, int device, size_t n)
      : rt(rt), n(n), data(static_cast<float*>(rt.allocDevice(device, n * sizeof(float)))) {}
  ~DeviceFloats() { rt.freeDevice(data); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  HostRuntime& rt;
  size_t n;
  float* data;
};

// A stream of the caller's on device, where it produces inputs, and their
// ready event; destroyed with the object, after the stream's work.
struct UserStream {
  UserStream(HostRuntime& rt, int device)
      : rt(rt), stream(rt.createStream(device)), ready(rt.createEvent(device, false)) {}
  ~UserStream() {
    rt.synchronize(stream);
    rt.destroyEvent(ready);
    rt.destroyStream(stream);
  }
  UserStream(const UserStream&) = delete;
  UserStream& operator=(const UserStream&) = delete;
  // A producer that has not finished: the stream waits until held is
  // ready (bounded), and ready is recorded behind it.
  void holdUntil(std::shared_future<void> held) {
    rt.launch(stream, Stage::kCopy, [held] { (void)held.wait_for(kLimit); });
    rt.record(ready, stream);
  }
  HostRuntime& rt;
  device::Stream stream;
  device::Event ready;
};

inline Request cudaRequest(const std::string& name, OpType op, size_t n, int device, int set = 0) {
  Request q;
  q.name = name;
  q.op = op;
  q.dtype = DataType::kFloat32;
  q.shape = {static_cast<int64_t>(n)};
  q.device = DeviceKind::kCuda;
  q.deviceIndex = device;
  q.processSet = set;
  return q;
}

inline Handle allreduce(Engine& engine, const std::string& name, DeviceFloats& t, int device,
                 void* ready = nullptr, std::function<void(const Status&)> onDone = {}) {
  Entry e;
  e.input = t.data;
  e.output = t.data;
  e.readyEvent = ready;
  e.onDone = std::move(onDone);
  return engine.enqueue(cudaRequest(name, OpType::kAllreduce, t.n, device), std::move(e));
}

// Waits for h (bounded) and returns its status.
inline Status settle(const Handle& h) {
  if (!h.waitFor(kLimit)) return Status{ErrorCode::kTimeout, "test: handle still pending"};
  return h.status();
}

inline bool mentions(const Status& s, const std::string& text) {
  return s.message.find(text) != std::string::npos;
}

}  // namespace kolo::gpu_test
