// Start-up at scale: one rank of a job of N processes, on kolo's core API
// alone (kolo::init, one 4-byte allreduce, nine more). Run it under kolorun
// (benchmarks/startup.sh does, at several N, and summarises):
//
//   KOLO_SHM=0 KOLO_BENCH_EPOCH_NS=$(date +%s%N)
//   kolorun -np 64 build/bench/benchmarks/bench_startup   (with both set)
//
// Each rank prints one line:
//
//   startup rank=R started=S init=S first=S tenth=S sockets=K store_requests=Q
//           store_us=U
//
// Times are seconds since KOLO_BENCH_EPOCH_NS (the wall clock when the
// launcher was started; this process's own start when it is unset): the
// process started (to the kernel's clock tick), init() returned, the first
// allreduce completed, the tenth did.
// sockets counts this process's open socket descriptors after the tenth
// (listeners, peers, the store); store_requests is every request it sent to
// the rendezvous store (kolo::storeRequestsMade()). Then every rank times 20
// store requests at once, through a client of its own: store_us is the mean
// (what docs/benchmarks.md's start-up model scales). With KOLO_SHM=0 every
// rank talks over TCP, as with one rank per host.
//
// With --load-only the process exits at once, before kolo::init: what
// starting N processes that load kolo's libraries costs (startup.sh's
// "load" column), apart from what kolo does at start-up.
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kolo/engine.h"
#include "kolo/kolo.h"
#include "kolo/tcp_store.h"

namespace {

double secondsSinceEpoch(int64_t epochNs) {
  const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  return static_cast<double>(now - epochNs) * 1e-9;
}

// This process's start (from /proc), for runs without an epoch.
int64_t processStartNs() {
  FILE* f = std::fopen("/proc/self/stat", "r");
  FILE* up = std::fopen("/proc/uptime", "r");
  int64_t result = 0;
  if (f != nullptr && up != nullptr) {
    char buf[4096];
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = 0;
    // Field 22 (starttime, clock ticks since boot) follows the ')' of comm.
    const char* p = std::strrchr(buf, ')');
    unsigned long long start = 0;
    int field = 2;
    for (; p != nullptr && *p != 0 && field < 22; ++p) {
      if (*p == ' ') ++field;
    }
    if (p != nullptr) start = std::strtoull(p, nullptr, 10);
    double uptime = 0;
    if (std::fscanf(up, "%lf", &uptime) == 1) {
      const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
      const double sinceStart = uptime - static_cast<double>(start) / ticks;
      const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
      result = now - static_cast<int64_t>(sinceStart * 1e9);
    }
  }
  if (f != nullptr) std::fclose(f);
  if (up != nullptr) std::fclose(up);
  return result;
}

int openSockets() {
  int count = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (dirent* entry = readdir(dir)) {
    const std::string path = std::string("/proc/self/fd/") + entry->d_name;
    char target[256];
    const ssize_t len = readlink(path.c_str(), target, sizeof(target) - 1);
    if (len <= 0) continue;
    target[len] = 0;
    if (std::strncmp(target, "socket:", 7) == 0) ++count;
  }
  closedir(dir);
  return count;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--load-only") == 0) return 0;
  const char* epochText = std::getenv("KOLO_BENCH_EPOCH_NS");
  const int64_t epoch =
      epochText != nullptr ? std::strtoll(epochText, nullptr, 10) : processStartNs();
  try {
    kolo::init();
    const double init = secondsSinceEpoch(epoch);
    float value = 0.0f;  // the sum stays 0
    double first = 0;
    for (int i = 0; i < 10; ++i) {
      kolo::Request request;
      request.name = "startup.allreduce";
      request.shape = {1};
      kolo::Entry entry;
      entry.input = &value;
      entry.output = &value;
      kolo::defaultEngine().enqueue(request, entry).wait();  // throws on failure
      if (i == 0) first = secondsSinceEpoch(epoch);
    }
    const double tenth = secondsSinceEpoch(epoch);
    const int sockets = openSockets();
    const auto requests = kolo::storeRequestsMade();
    // The store's cost per request with every rank asking at once: the
    // model in docs/benchmarks.md scales start-up from it. A second client
    // (its own connection), after the measured part, so the counts above
    // are the engine's alone.
    double storeUs = 0;
    {
      std::unique_ptr<kolo::TcpStoreServer> none;
      auto info = kolo::launchInfoFromEnv();
      auto store = kolo::connectLaunchStore(info, std::chrono::seconds(60), none);
      store->set("startup/probe/" + std::to_string(info.identity.rank), {'1'});
      kolo::defaultEngine().barrier().wait();
      constexpr int kProbes = 20;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kProbes; ++i) {
        store->check("startup/probe/" + std::to_string((info.identity.rank + i) %
                                                       info.identity.size));
      }
      storeUs = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                          start)
                    .count() /
                kProbes;
    }
    const int rank = kolo::rank();
    kolo::shutdown();
    const double started = static_cast<double>(processStartNs() - epoch) * 1e-9;
    std::printf(
        "startup rank=%d started=%.3f init=%.4f first=%.4f tenth=%.4f sockets=%d "
        "store_requests=%llu store_us=%.1f\n",
        rank, started, init, first, tenth, sockets, static_cast<unsigned long long>(requests),
        storeUs);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "startup: %s\n", e.what());
    return 1;
  }
}
