// The parts of the conformance harness every backend shares. How ranks
// run (threads in conformance.cc, MPI processes in mpi_runner.cc) is
// runWithArgs, defined by whichever runner the test binary links.
#include <stdexcept>
#include <string>

#include "comm/conformance.h"
#include "harness/harness.h"

namespace kolo::test {

Config commConfig() {
  Config config = testConfig();
  config.timeout = std::chrono::seconds(30);
  return config;
}

void runCollectives(const CommBackend& backend, int n,
                    const std::function<void(int rank, comm::Collectives&)>& fn,
                    const Config& config) {
  runWithArgs(
      n,
      [&](int rank, const comm::BackendArgs& args) {
        auto collectives = backend.createCollectives(args);
        fn(rank, *collectives);
      },
      config);
}

void runControl(const CommBackend& backend, int n,
                const std::function<void(int rank, comm::ControlChannel&)>& fn,
                const Config& config) {
  runWithArgs(
      n,
      [&](int rank, const comm::BackendArgs& args) {
        auto control = backend.createControlChannel(args);
        if (control->rank() != rank || control->size() != n) {
          throw std::runtime_error("control channel reports rank " +
                                   std::to_string(control->rank()) + " of " +
                                   std::to_string(control->size()));
        }
        fn(rank, *control);
      },
      config);
}

std::string commTestName(const ::testing::TestParamInfo<std::tuple<CommBackend, int>>& info) {
  return std::to_string(std::get<1>(info.param)) + "ranks";
}

std::string commFailureTestName(const ::testing::TestParamInfo<CommBackend>& info) {
  return info.param.name;  // one instance per backend
}

}  // namespace kolo::test
