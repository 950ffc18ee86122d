// The engine's path for one small CUDA allreduce, over the host device
// runtime (device/host: every piece of device work is a task on a stream
// thread, with CUDA's ordering). This is not a GPU timing: it shows what
// the orchestration costs around the device work, and where it runs.
//
//   bench_gpu_path_host [--iters 2000] [--rounds 5] [--bytes 4] [--ready]
//
// kolo: engine.enqueue(CUDA allreduce, size 1, KOLO_GPU_OPERATIONS=nccl,
//       the host runtime's collectives).wait(); with --ready the input's
//       ready event is recorded on a user stream first, as the PyTorch
//       adapter does.
// raw:  one piece of device work on a stream of the same runtime and a
//       synchronize of that stream: what a raw ncclAllReduce and
//       cudaStreamSynchronize cost at size 1, over the same runtime.
//
// The two take turns, op by op, for --iters ops per round; each round
// prints the median latency of each, and the summary the median over
// rounds of kolo's extra time per op. A separate pass of kolo ops alone
// then counts, per op:
//   - the device runtime calls (each at least one CUDA runtime call in
//     CudaRuntime), by method, on kolo's threads (pinned to the device)
//     and on the caller's;
//   - each thread's wake-ups (voluntary context switches: the thread
//     blocked and another woke it, a hand-off that slept) and CPU time,
//     by thread name: the caller, kolo-loop, kolo-watch, host-stream (the
//     device's stand-in) and host-callback (where the host runtime runs
//     host functions, as CUDA runs them on a driver thread while the
//     stream waits). A hand-off that spins costs CPU time instead.
// KOLO_* variables apply (KOLO_SPIN_TIME, KOLO_CYCLE_TIME, ...).
#include <dirent.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "common/thread_name.h"
#include "device/host/host_runtime.h"
#include "kolo/engine.h"
#include "kolo/store.h"

namespace {

using kolo::bench::Clock;
using kolo::device::host::HostRuntime;

struct ThreadSample {
  std::string name;
  uint64_t wakeups = 0;    // voluntary context switches
  uint64_t preempted = 0;  // involuntary ones
  uint64_t cpuNs = 0;
};

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

uint64_t statusField(const std::string& status, const std::string& field) {
  const size_t at = status.find(field + ":");
  if (at == std::string::npos) return 0;
  return std::strtoull(status.c_str() + at + field.size() + 1, nullptr, 10);
}

// Every thread of this process now, by thread id (/proc/self/task).
std::map<long, ThreadSample> sampleThreads() {
  std::map<long, ThreadSample> out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (dirent* d = readdir(dir)) {
    if (d->d_name[0] == '.') continue;
    const std::string base = std::string("/proc/self/task/") + d->d_name + "/";
    ThreadSample t;
    t.name = readFile(base + "comm");
    if (!t.name.empty() && t.name.back() == '\n') t.name.pop_back();
    const std::string status = readFile(base + "status");
    t.wakeups = statusField(status, "voluntary_ctxt_switches");
    t.preempted = statusField(status, "nonvoluntary_ctxt_switches");
    t.cpuNs = std::strtoull(readFile(base + "schedstat").c_str(), nullptr, 10);
    out[std::strtol(d->d_name, nullptr, 10)] = t;
  }
  closedir(dir);
  return out;
}

// after - before, summed by thread role (the caller is the main thread).
std::map<std::string, ThreadSample> byRole(const std::map<long, ThreadSample>& before,
                                           const std::map<long, ThreadSample>& after) {
  std::map<std::string, ThreadSample> out;
  for (const auto& [tid, a] : after) {
    ThreadSample b;
    if (auto it = before.find(tid); it != before.end()) b = it->second;
    std::string role = a.name;
    if (tid == static_cast<long>(getpid())) role = "caller";
    else if (role.rfind("kolo-", 0) != 0 && role.rfind("host-", 0) != 0) role = "other";
    ThreadSample& r = out[role];
    r.name = role;
    r.wakeups += a.wakeups - b.wakeups;
    r.preempted += a.preempted - b.preempted;
    r.cpuNs += a.cpuNs - b.cpuNs;
  }
  return out;
}

double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The engine's path for one small CUDA allreduce, over the host device runtime"};
  int iters = 2000;
  int rounds = 5;
  size_t bytes = 4;
  bool ready = false;
  app.add_option("--iters", iters, "ops of each per round")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "rounds")->check(CLI::PositiveNumber);
  app.add_option("--bytes", bytes, "bytes per op (float32)")->check(CLI::PositiveNumber);
  app.add_flag("--ready", ready, "record a ready event on a user stream before each op");
  CLI11_PARSE(app, argc, argv);
  kolo::nameThisThread("bench-caller");

  auto rt = std::make_shared<HostRuntime>(1);
  kolo::Config config = kolo::bench::engineConfig("gloo");
  config.deviceRuntime = rt;
  config.gpuOperations = "nccl";  // the host runtime's device collectives
  kolo::Engine engine(config, kolo::Identity{}, kolo::makeHashStore());

  const size_t count = std::max<size_t>(1, bytes / 4);
  void* buf = rt->allocDevice(0, count * 4);
  kolo::device::Stream user = rt->createStream(0);
  kolo::device::Event readyEvent = rt->createEvent(0, false);
  kolo::Request q;
  q.name = "bench.small";
  q.dtype = kolo::DataType::kFloat32;
  q.shape = {static_cast<int64_t>(count)};
  q.device = kolo::DeviceKind::kCuda;
  q.deviceIndex = 0;

  auto viaKolo = [&] {
    kolo::Entry e;
    e.input = buf;
    e.output = buf;
    if (ready) {
      rt->record(readyEvent, user);
      e.readyEvent = readyEvent;
    }
    engine.enqueue(q, std::move(e)).wait();
  };
  auto raw = [&] {
    rt->launch(user, HostRuntime::Stage::kCollective, [] {});
    rt->synchronize(user);
  };

  std::printf("bench_gpu_path_host: %zu B float32 allreduce, size 1, over the host device "
              "runtime; %d rounds of %d ops each, turn by turn%s\n",
              count * 4, rounds, iters, ready ? ", with a ready event" : "");
  std::printf("%6s %10s %10s %12s\n", "round", "raw us", "kolo us", "kolo - raw");
  std::vector<double> extra;
  for (int round = 0; round < rounds; ++round) {
    std::vector<double> r, k;
    for (int i = 0; i < iters + 20; ++i) {  // the first 20 warm up
      const auto t0 = Clock::now();
      raw();
      const auto t1 = Clock::now();
      viaKolo();
      const auto t2 = Clock::now();
      if (i < 20) continue;
      r.push_back(us(t1 - t0));
      k.push_back(us(t2 - t1));
    }
    const double rm = kolo::bench::median(r), km = kolo::bench::median(k);
    extra.push_back(km - rm);
    std::printf("%6d %10.1f %10.1f %12.1f\n", round, rm, km, km - rm);
  }

  // kolo alone: calls and threads per op.
  const auto threadsBefore = sampleThreads();
  const HostRuntime::Calls before = rt->calls();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) viaKolo();
  const double perOpUs = us(Clock::now() - t0) / iters;
  const HostRuntime::Calls after = rt->calls();
  const auto threads = byRole(threadsBefore, sampleThreads());

  std::printf("\nkolo alone, %d ops: %.1f us per op\n", iters, perOpUs);
  std::printf("device runtime calls per op (on kolo's threads | on the caller's):\n");
  for (size_t m = 0; m < HostRuntime::kMethods; ++m) {
    const double pinned = double(after.pinnedBy[m] - before.pinnedBy[m]) / iters;
    const double caller = double(after.unpinnedBy[m] - before.unpinnedBy[m]) / iters;
    if (pinned == 0 && caller == 0) continue;
    std::printf("  %-14s %6.2f | %6.2f\n",
                HostRuntime::methodName(static_cast<HostRuntime::Method>(m)), pinned, caller);
  }
  const double pinnedCalls = double(after.pinned - before.pinned) / iters;
  const double callerCalls = double(after.unpinned - before.unpinned) / iters;
  std::printf("  %-14s %6.2f | %6.2f\n", "all", pinnedCalls, callerCalls);
  std::printf("per op, by thread: wake-ups (blocked, then woken), preemptions, CPU us\n");
  double wakeups = 0;
  for (const auto& [role, t] : threads) {
    std::printf("  %-14s %6.2f %6.2f %8.2f\n", role.c_str(), double(t.wakeups) / iters,
                double(t.preempted) / iters, t.cpuNs / 1e3 / iters);
    wakeups += double(t.wakeups) / iters;
  }
  std::printf("summary: %zu B allreduce over the host runtime, size 1: kolo adds %.1f us per op "
              "over a raw stream op (median of %d rounds); %.2f runtime calls on kolo's threads "
              "and %.2f on the caller's per op; %.2f wake-ups per op\n",
              count * 4, kolo::bench::median(extra), rounds, pinnedCalls, callerCalls, wakeups);

  engine.shutdown();
  rt->destroyEvent(readyEvent);
  rt->destroyStream(user);
  rt->freeDevice(buf);
  return 0;
}
