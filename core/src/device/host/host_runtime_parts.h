// The parts of HostRuntime (host_runtime.h) that its sources share:
// host_runtime.cc (memory, streams, events, waits), host_threads.cc (what
// CUDA keeps per thread, captures, call counts) and host_callbacks.cc (host
// functions and their callback threads).
#pragma once

#include <condition_variable>
#include <deque>
#include <string>
#include <thread>

#include "device/host/host_runtime.h"

namespace kolo::device::host {

struct HostRuntime::HostStream {
  int device = 0;
  std::deque<Task> tasks;  // guarded by the runtime's mu_
  bool busy = false;       // a task runs now
  Stage running = Stage::kCount;  // the stage of the task that runs now
  bool waiting = false;           // that task waits for an event (wait())
  bool stop = false;
  // Wakes the stream's thread while it has nothing to run (new work, stop):
  // only it, where the runtime's changed_ would wake every stream's.
  std::condition_variable work;
  bool capturing = false;
  CaptureMode captureMode = CaptureMode::kGlobal;
  std::thread::id captureOwner;  // the thread that began the capture
  std::string invalidatedBy;     // the prohibited call that broke the capture
  std::thread thread;
};

class HostRuntime::CallerSafe {
 public:
  explicit CallerSafe(HostRuntime& rt);
  ~CallerSafe();
  CallerSafe(const CallerSafe&) = delete;
  CallerSafe& operator=(const CallerSafe&) = delete;

 private:
  HostRuntime& rt_;
  bool switched_ = false;
};

}  // namespace kolo::device::host
