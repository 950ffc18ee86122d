// The comm conformance suite against the shared-memory backend with ranks as
// processes (an mpirun job of 2, 3 and 4, ctest label multiprocess): each
// suite runs with one rank and with the whole world. Failure behaviour
// between processes (a killed or stopped rank) is covered by
// tests/reliability/process_fault_test.cc; the thread-based failure suite
// does not apply as written.
#include "comm/conformance.h"
#include "comm/mpi_world.h"
#include "comm/shm/factory.h"

namespace kolo::test {
namespace {

std::vector<int> worldSizes() {
  const int n = mpiWorldSize();
  return n == 1 ? std::vector<int>{1} : std::vector<int>{1, n};
}

const CommBackend kShm{"ShmProcesses", comm::shm::createControlChannel,
                       comm::shm::createCollectives};

INSTANTIATE_TEST_SUITE_P(ShmProcesses, CollectivesConformance,
                         ::testing::Combine(::testing::Values(kShm),
                                            ::testing::ValuesIn(worldSizes())),
                         commTestName);
INSTANTIATE_TEST_SUITE_P(ShmProcesses, ControlChannelConformance,
                         ::testing::Combine(::testing::Values(kShm),
                                            ::testing::ValuesIn(worldSizes())),
                         commTestName);

}  // namespace
}  // namespace kolo::test

int main(int argc, char** argv) {
  // BarrierWaitsForEveryRank counts arrivals in a variable shared by rank
  // threads; between processes the barrier is what every other test uses.
  const std::string excluded =
      "*BarrierWaitsForEveryRank/" + std::to_string(kolo::test::mpiWorldSize()) + "ranks";
  return kolo::test::runMpiTests(argc, argv, /*appInitialisesMpi=*/true,
                                 kolo::test::mpiWorldSize() > 1 ? excluded : "");
}
