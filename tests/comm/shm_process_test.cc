// The comm conformance suite against the shared-memory backend with ranks as
// processes (an mpirun job of 2, 3 and 4, ctest label multiprocess): each
// suite runs with one rank and with the whole world. Failure behaviour
// between processes (a killed or stopped rank) is covered by
// tests/reliability/process_fault_test.cc; the thread-based failure suite
// does not apply as written. ShmProcessesDirect: buffers in each process's
// arena, which the peers map through /proc, reduced in place.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "comm/conformance.h"
#include "comm/mpi_world.h"
#include "comm/shm/arena.h"
#include "comm/shm/collectives.h"
#include "comm/shm/factory.h"
#include "comm/test_values.h"
#include "kolo/shareable.h"

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

// Every rank's buffer from allocateShareable in its own process: the ranks
// map each other's arenas and reduce in place, for a sum and an average,
// with the values the slots give.
TEST(ShmProcessesDirect, BuffersInEveryProcesssArenaAreReducedInPlace) {
  const int n = mpiWorldSize();
  if (n == 1) GTEST_SKIP() << "one process: nothing to share (run under mpirun -np 2 or more)";
  if (comm::shm::Arena::forThisProcess() == nullptr) {
    GTEST_SKIP() << "this process has no arena (an address space limit, or no memfd_create)";
  }
  runWithArgs(n, [&](int rank, const comm::BackendArgs& args) {
    auto c = comm::shm::createCollectives(args);
    auto& shm = dynamic_cast<comm::shm::Collectives&>(*c);
    for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32}) {
      const size_t es = elementSize(dtype);
      const size_t count = 4 * comm::shm::kDirectBytes / es + 29;
      ShareableBuffer buf(dtype, count);
      ASSERT_NE(buf.data(), nullptr) << "no arena in this process";
      for (size_t i = 0; i < count; ++i) {
        buf.values.set(i, reduceInput(dtype, ReduceOp::kSum, rank, i));
      }
      buf.in();
      const uint64_t before = shm.directAllreduces();
      c->allreduce(buf.data(), count, dtype, ReduceOp::kSum);
      EXPECT_EQ(shm.directAllreduces(), before + 1) << toString(dtype) << ": not in place";
      buf.out();
      expectElements(buf.values, 0, count, std::string("direct sum of ") + toString(dtype),
                     [&](size_t i) { return reduceExpected(dtype, ReduceOp::kSum, n, i); });
    }
    const size_t count = 3 * comm::shm::kDirectBytes / 8 + 1;
    std::shared_ptr<void> block = allocateShareable(count * 8);
    ASSERT_NE(block, nullptr);
    auto* x = static_cast<double*>(block.get());
    for (size_t i = 0; i < count; ++i) x[i] = (rank + 1) * 2.0 + static_cast<double>(i % 7);
    c->allreduceScaled(x, count, DataType::kFloat64, ReduceOp::kSum, 1.0 / n);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_DOUBLE_EQ(x[i], (n + 1) + static_cast<double>(i % 7)) << "average element " << i;
    }
  });
}

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
