// The counting side of kolo_cudacount (cudacount.h); the trampolines that
// call kolo_cudacount_hit are generated (gen_trampolines.py).
#include "cudacount.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

extern "C" {
extern const char* const kolo_cudacount_names[];
extern const int kolo_cudacount_count;
void* kolo_cudacount_hit(int index);
}

namespace {

// One thread's counts. Written by that thread only; read (relaxed) by a
// report, so a count may lag by the calls in flight.
struct ThreadCounts {
  std::string name;
  std::unique_ptr<std::atomic<uint64_t>[]> calls;
};

struct Registry {
  std::mutex mu;
  std::vector<ThreadCounts*> threads;  // never freed: a report may outlive a thread
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads count at exit too
  return *r;
}

std::atomic<void*>* realFunctions() {
  static std::atomic<void*>* fns = new std::atomic<void*>[kolo_cudacount_count]();
  return fns;
}

thread_local ThreadCounts* tCounts = nullptr;

ThreadCounts* mine() {
  if (tCounts != nullptr) return tCounts;
  auto* c = new ThreadCounts;
  char name[64] = "?";
  pthread_getname_np(pthread_self(), name, sizeof(name));
  c->name = name;
  c->calls.reset(new std::atomic<uint64_t>[kolo_cudacount_count]());
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().threads.push_back(c);
  }
  tCounts = c;
  return c;
}

uint64_t sum(const ThreadCounts& c) {
  uint64_t n = 0;
  for (int i = 0; i < kolo_cudacount_count; ++i) n += c.calls[i].load(std::memory_order_relaxed);
  return n;
}

std::string reportText() {
  std::vector<std::tuple<uint64_t, std::string, const char*>> rows;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    for (const ThreadCounts* c : registry().threads) {
      for (int i = 0; i < kolo_cudacount_count; ++i) {
        const uint64_t n = c->calls[i].load(std::memory_order_relaxed);
        if (n > 0) rows.emplace_back(n, c->name, kolo_cudacount_names[i]);
      }
    }
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::get<0>(a) > std::get<0>(b);
  });
  std::string text;
  for (const auto& [n, thread, fn] : rows) {
    text += thread + " " + fn + " " + std::to_string(n) + "\n";
  }
  return text;
}

void writeAtExit() {
  const char* env = std::getenv("KOLO_CUDACOUNT");
  if (env == nullptr || *env == '\0') return;
  const std::string text = reportText();
  // A process that made no call (a launcher that started the ranks) leaves
  // the file alone.
  if (text.empty()) return;
  std::string path = env;
  const size_t pid = path.find("%p");
  if (pid != std::string::npos) path.replace(pid, 2, std::to_string(getpid()));
  FILE* f = path == "-" ? stderr : std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "kolo_cudacount: cannot write %s\n", path.c_str());
    return;
  }
  std::fputs(text.c_str(), f);
  if (f != stderr) std::fclose(f);
}

struct AtExit {
  AtExit() { std::atexit(writeAtExit); }
} atExit;

}  // namespace

extern "C" {

void* kolo_cudacount_hit(int index) {
  mine()->calls[index].fetch_add(1, std::memory_order_relaxed);
  std::atomic<void*>& slot = realFunctions()[index];
  void* fn = slot.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = dlsym(RTLD_NEXT, kolo_cudacount_names[index]);
    if (fn == nullptr) {
      std::fprintf(stderr,
                   "kolo_cudacount: %s has no definition after this library (is libcudart "
                   "loaded?)\n",
                   kolo_cudacount_names[index]);
      std::abort();
    }
    slot.store(fn, std::memory_order_release);
  }
  return fn;
}

void kolo_cudacount_reset(void) {
  std::lock_guard<std::mutex> lock(registry().mu);
  for (ThreadCounts* c : registry().threads) {
    for (int i = 0; i < kolo_cudacount_count; ++i) c->calls[i].store(0, std::memory_order_relaxed);
  }
}

uint64_t kolo_cudacount_total(int which) {
  ThreadCounts* self = mine();
  std::lock_guard<std::mutex> lock(registry().mu);
  uint64_t n = 0;
  for (const ThreadCounts* c : registry().threads) {
    const bool isSelf = c == self;
    if (which == 2 || (which == 0 && isSelf) || (which == 1 && !isSelf)) n += sum(*c);
  }
  return n;
}

uint64_t kolo_cudacount_total_named(const char* prefix) {
  const size_t len = std::strlen(prefix);
  std::lock_guard<std::mutex> lock(registry().mu);
  uint64_t n = 0;
  for (const ThreadCounts* c : registry().threads) {
    if (c->name.compare(0, len, prefix) == 0) n += sum(*c);
  }
  return n;
}

size_t kolo_cudacount_report(char* buf, size_t size) {
  const std::string text = reportText();
  if (buf != nullptr && size > 0) {
    const size_t n = std::min(size - 1, text.size());
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size();
}

}  // extern "C"
