// Checks tools/cudacount under LD_PRELOAD, without a GPU: libcudart's
// calls then fail (no device), and each is still a call the library must
// count, on the thread that made it, from this program and from
// libkolo_core alike. Exit status 0 when every count is right.
#include <dlfcn.h>
#include <pthread.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include <cuda_runtime_api.h>

#include "device/cuda/memory.h"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++failures;
  }
}

template <typename Fn>
Fn find(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

int main() {
  auto total = find<uint64_t (*)(int)>("kolo_cudacount_total");
  auto named = find<uint64_t (*)(const char*)>("kolo_cudacount_total_named");
  auto reset = find<void (*)()>("kolo_cudacount_reset");
  auto report = find<size_t (*)(char*, size_t)>("kolo_cudacount_report");
  if (total == nullptr || named == nullptr || reset == nullptr || report == nullptr) {
    std::fprintf(stderr, "FAILED: kolo_cudacount is not preloaded (LD_PRELOAD)\n");
    return 1;
  }
  reset();
  int device = -1;
  int count = -1;
  for (int i = 0; i < 3; ++i) (void)cudaGetDevice(&device);
  (void)cudaGetDeviceCount(&count);
  const uint64_t mainOnly = total(0);
  expect(mainOnly == 4, "this thread's calls: " + std::to_string(mainOnly) + ", expected 4");

  std::thread other([] {
    pthread_setname_np(pthread_self(), "kolo-check");
    for (int i = 0; i < 5; ++i) (void)cudaEventQuery(nullptr);
  });
  other.join();
  expect(named("kolo-check") == 5,
         "calls of thread kolo-check: " + std::to_string(named("kolo-check")) + ", expected 5");
  expect(total(1) == 5, "other threads' calls: " + std::to_string(total(1)) + ", expected 5");

  // A call libkolo_core makes (cudaPointerGetAttributes, then whatever it
  // does on failure) counts as well.
  char host[8];
  (void)kolo::device::cuda::deviceOf(host);
  char text[4096];
  report(text, sizeof(text));
  const std::string lines(text);
  expect(lines.find("cudaPointerGetAttributes 1\n") != std::string::npos,
         "libkolo_core's cudaPointerGetAttributes is not in the report:\n" + lines);
  expect(lines.find("kolo-check cudaEventQuery 5\n") != std::string::npos,
         "kolo-check's cudaEventQuery calls are not in the report:\n" + lines);
  expect(total(0) > mainOnly, "libkolo_core's call did not count on this thread");

  reset();
  expect(total(2) == 0, "after reset: " + std::to_string(total(2)) + " calls");
  if (failures == 0) std::printf("kolo_cudacount: every count right\n%s", lines.c_str());
  return failures == 0 ? 0 : 1;
}
