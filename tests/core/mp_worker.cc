// A kolo program for multi-process tests: kolo::init() from the environment,
// then one scenario. Prints "OK" and exits 0, or prints the error to stdout
// and exits 3.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
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
