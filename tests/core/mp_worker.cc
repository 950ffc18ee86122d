// A kolo program for multi-process tests: kolo::init() from the environment,
// then one scenario. Prints "OK" and exits 0, or prints the error to stdout
// and exits 3.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "kolo/kolo.h"

namespace {

void allreduceStep(int step) {
  auto& engine = kolo::defaultEngine();
  std::vector<float> v(1000, static_cast<float>(kolo::rank() + 1));
  kolo::Request q;
  q.name = "grad";
  q.dtype = kolo::DataType::kFloat32;
  q.shape = {1000};
  kolo::Entry e;
  e.input = v.data();
  e.output = v.data();
  engine.enqueue(q, e).wait();
  const float want = kolo::size() * (kolo::size() + 1) / 2.0f;
  if (v[999] != want) {
    std::printf("step %d: got %f want %f\n", step, v[999], want);
    std::exit(4);
  }
}

// 64 MB float32 allreduces back to back: each takes milliseconds, so a
// signal that arrives at a random moment most likely finds every rank inside
// the data-plane collective. Prints which step failed.
void largeAllreducesUntilError() {
  auto& engine = kolo::defaultEngine();
  std::vector<float> v(size_t(16) << 20, 1.0f);
  for (int step = 0;; ++step) {
    kolo::Request q;
    q.name = "large";
    q.dtype = kolo::DataType::kFloat32;
    q.shape = {static_cast<int64_t>(v.size())};
    engine.enqueue(q, kolo::Entry{v.data(), v.data(), {}, {}}).wait();
    // No refill between steps (it would take as long as the allreduce).
    if (step == 0 && v.back() != static_cast<float>(kolo::size())) {
      std::printf("step %d: got %f\n", step, v.back());
      std::exit(4);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "sum";
  try {
    kolo::init();
    if (scenario == "sum") {
      for (int step = 0; step < 20; ++step) allreduceStep(step);
    } else if (scenario == "stop" || scenario == "die") {
      allreduceStep(0);
      if (kolo::rank() == 1) {
        if (scenario == "stop") raise(SIGSTOP);
        _exit(9);
      }
      for (int step = 1; step < 1000; ++step) allreduceStep(step);
    } else if (scenario == "kill-mid" || scenario == "stop-mid") {
      allreduceStep(0);
      if (kolo::rank() == 1) {
        const int sig = scenario == "kill-mid" ? SIGKILL : SIGSTOP;
        std::thread([sig] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          raise(sig);
        }).detach();
      }
      largeAllreducesUntilError();
    }
    kolo::shutdown();
    std::printf("OK\n");
    return 0;
  } catch (const std::exception& e) {
    std::printf("ERROR: %s\n", e.what());
    std::fflush(stdout);
    return 3;
  }
}
