// A job through the installed package: init, a sum allreduce of 21 on every
// rank, shutdown. Run alone (size 1) or under the installed kolorun.
#include <cstdio>

#include "kolo/kolo.h"

int main() {
  kolo::init();
  float x = 21.0f;
  kolo::Request q;
  q.name = "x";
  q.shape = {1};
  kolo::defaultEngine().enqueue(q, kolo::Entry{&x, &x, {}, {}}).wait();
  const int size = kolo::size();
  const int rank = kolo::rank();
  std::printf("rank %d size %d value %.1f\n", rank, size, x);
  kolo::shutdown();
  return x == 21.0f * static_cast<float>(size) ? 0 : 1;
}
