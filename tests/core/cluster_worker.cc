// A kolo program for the cluster-environment tests (Kubernetes operators'
// environments, mpirun with a hostfile): kolo::init() from whatever the
// environment holds, an allreduce of (rank + 1) over 1000 floats, then one
// line with what kolo derived:
//   cluster-worker rank=R size=S local=L/LS cross=C/CS sum=X controller=NAME
// Exits 0, or prints "ERROR: ..." and exits 3.
#include <cstdio>
#include <exception>
#include <vector>

#include "kolo/kolo.h"

int main() {
  try {
    kolo::init();
    kolo::Engine& engine = kolo::defaultEngine();
    std::vector<float> v(1000, static_cast<float>(kolo::rank() + 1));
    kolo::Request q;
    q.name = "cluster.grad";
    q.dtype = kolo::DataType::kFloat32;
    q.shape = {1000};
    kolo::Entry e;
    e.input = v.data();
    e.output = v.data();
    engine.enqueue(q, e).wait();
    std::printf("cluster-worker rank=%d size=%d local=%d/%d cross=%d/%d sum=%g controller=%s\n",
                kolo::rank(), kolo::size(), kolo::localRank(), kolo::localSize(), kolo::crossRank(),
                kolo::crossSize(), v[999], engine.config().controller.c_str());
    std::fflush(stdout);
    kolo::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::printf("ERROR: %s\n", e.what());
    std::fflush(stdout);
    return 3;
  }
}
