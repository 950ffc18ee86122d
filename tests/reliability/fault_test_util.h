// Helpers shared by process_fault_test.cc and network_fault_test.cc: the
// fault worker's output lines, the fault clock, a scratch directory and a
// watchdog that ends a stuck case.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <thread>

#include "launcher_test_util.h"

namespace kolo::reliability {

// Compiled in by tests/reliability/CMakeLists.txt.
inline const char* faultWorkerPath() { return KOLO_FAULT_WORKER; }

inline int64_t realtimeMs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// The fault time the worker (or the test) wrote; -1 when there is none.
inline int64_t readFaultTime(const std::string& path) {
  std::ifstream in(path);
  long long ms = -1;
  if (!(in >> ms)) return -1;
  return ms;
}

inline void writeFaultTime(const std::string& path, int64_t ms) {
  std::ofstream(path + ".tmp") << ms << "\n";
  std::filesystem::rename(path + ".tmp", path);
}

// "SURVIVOR rank=<r> detected_after_ms=<ms> error=<what>" lines, by rank.
// Accepts kolorun's "[r]<stdout>:" and mpirun's "[j,r]<stdout>:" prefixes.
struct Survivor {
  long long detectedMs = -1;
  std::string error;
};
inline std::map<int, Survivor> survivorsIn(const std::string& out) {
  static const std::regex line(R"(SURVIVOR rank=(\d+) detected_after_ms=(-?\d+) error=(.*)$)");
  std::map<int, Survivor> found;
  for (const auto& l : launcher::testing::splitLines(out)) {
    std::smatch m;
    if (std::regex_search(l, m, line)) found[std::stoi(m[1])] = {std::stoll(m[2]), m[3]};
  }
  return found;
}

// "DONE rank=<r> steps=<n> checksum=<hex>" lines: rank -> checksum.
inline std::map<int, std::string> checksumsIn(const std::string& out) {
  static const std::regex line(R"(DONE rank=(\d+) steps=\d+ checksum=([0-9a-f]+))");
  std::map<int, std::string> found;
  for (const auto& l : launcher::testing::splitLines(out)) {
    std::smatch m;
    if (std::regex_search(l, m, line)) found[std::stoi(m[1])] = m[2];
  }
  return found;
}

// SIGKILLs every live process whose command line holds marker (SIGKILL
// also ends stopped ones). Returns how many there were.
inline size_t killProcessesWith(const std::string& marker) {
  auto pids = launcher::testing::processesWith(marker);
  for (pid_t p : pids) kill(p, SIGKILL);
  return pids.size();
}

// A fresh directory under TMPDIR (or /tmp), removed with its contents.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/kolo-fault-XXXXXX";
    if (mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Bounds a kolorun job from outside. At `soft` it sends SIGTERM to the
// watched kolorun (a polite stop, like Ctrl-C; terminated() is then true).
// At `hard`, as a last resort against a hang that the test's own bounded
// waits miss, it says so on stderr, SIGKILLs kolorun and every process
// carrying marker (workers, remote shells, mpirun's), and ends this test
// process with exit code 1.
class Watchdog {
 public:
  Watchdog(std::string what, std::chrono::seconds soft, std::chrono::seconds hard,
           std::string marker)
      : what_(std::move(what)), marker_(std::move(marker)) {
    thread_ = std::thread([this, soft, hard] {
      const auto start = std::chrono::steady_clock::now();
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_until(lock, start + soft, [this] { return done_; })) return;
      terminated_ = true;
      if (pid_ > 0) kill(pid_, SIGTERM);
      if (cv_.wait_until(lock, start + hard, [this] { return done_; })) return;
      std::fprintf(stderr, "watchdog: %s still running after %lld s; killing kolorun and the job\n",
                   what_.c_str(), static_cast<long long>(hard.count()));
      if (pid_ > 0) kill(pid_, SIGKILL);
      killProcessesWith(marker_);
      std::_Exit(1);
    });
  }
  ~Watchdog() { stop(); }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void watch(pid_t kolorun) { pid_ = kolorun; }
  // Ends the watch (idempotent).
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  bool terminated() const { return terminated_; }

 private:
  std::string what_, marker_;
  std::atomic<pid_t> pid_{-1};
  std::atomic<bool> terminated_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace kolo::reliability
