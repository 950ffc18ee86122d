// A small kolo program for kolorun --mpi tests: kolo::init(), one allreduce
// of (rank + 1) and a line naming what it ran on, then kolo::shutdown().
//   probe rank R of N: sum S, controller C, cpu operations O, secret SET|unset,
//   store served by kolorun|of its own
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kolo/kolo.h"

int main() {
  kolo::init();
  kolo::Engine& engine = kolo::defaultEngine();
  std::vector<float> v(4, static_cast<float>(engine.rank() + 1));
  kolo::Request q;
  q.name = "probe";
  q.dtype = kolo::DataType::kFloat32;
  q.shape = {4};
  engine.enqueue(q, kolo::Entry{v.data(), v.data(), {}, {}}).wait();
  std::printf(
      "probe rank %d of %d: sum %g, controller %s, cpu operations %s, secret %s, store %s\n",
      engine.rank(), engine.size(), v[0], engine.config().controller.c_str(),
      engine.config().cpuOperations.c_str(),
      std::getenv("KOLO_SECRET_KEY") != nullptr ? "SET" : "unset",
      std::getenv("KOLO_RENDEZVOUS_HOSTED") != nullptr ? "served by kolorun" : "of its own");
  kolo::shutdown();
  return 0;
}
