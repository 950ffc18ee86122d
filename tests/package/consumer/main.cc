// Size-1 job through the installed package: init, allreduce, shutdown.
#include <cstdio>

#include "kolo/kolo.h"

int main() {
  kolo::init();
  float x = 21.0f;
  kolo::Request q;
  q.name = "x";
  q.shape = {1};
  kolo::defaultEngine().enqueue(q, kolo::Entry{&x, &x, {}, {}}).wait();
  std::printf("size %d value %.1f\n", kolo::size(), x);
  kolo::shutdown();
  return x == 21.0f ? 0 : 1;
}
