// mpi-specific behaviour beyond the conformance suite, run as part of
// test_comm_mpi (an mpirun job): identity from MPI, the barrier across
// processes, a silent peer timing out, invalid arguments, chunked large
// allreduces, MPI's own communicator staying untouched.
#include <mpi.h>

#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/conformance.h"
#include "comm/mpi/collectives.h"
#include "comm/mpi/context.h"
#include "comm/mpi/factory.h"
#include "comm/mpi_world.h"
#include "kolo/error.h"
#include "kolo/store.h"

namespace kolo::test {
namespace {

using Clock = std::chrono::steady_clock;

comm::BackendArgs worldArgs(const Config& config, const Identity& id,
                            const std::shared_ptr<Store>& store) {
  return comm::BackendArgs{config, id, store, ""};
}

TEST(MpiBackend, IdentityMatchesLauncher) {
  const Identity mpi = comm::mpi::worldIdentity();
  const LaunchInfo info = launchInfoFromEnv();
  EXPECT_EQ(info.launcher, "mpirun");
  EXPECT_EQ(mpi.rank, info.identity.rank);
  EXPECT_EQ(mpi.size, info.identity.size);
  EXPECT_EQ(mpi.localRank, info.identity.localRank);
  EXPECT_EQ(mpi.localSize, info.identity.localSize);
  // One host: every rank is local, one cross group.
  EXPECT_EQ(mpi.crossSize, 1);
  EXPECT_EQ(mpi.crossRank, 0);
}

TEST(MpiBackend, CudaAwareIsQueryable) {
  // No GPU here; the query must answer without throwing.
  (void)comm::mpi::cudaAware();
}

TEST(MpiBackend, IdentityOtherThanTheWorldIsInvalidArgument) {
  const int n = mpiWorldSize();
  if (n == 1) GTEST_SKIP() << "needs mpirun -np 2 or more";
  Identity id = comm::mpi::worldIdentity();
  id.rank = (id.rank + 1) % n;
  auto store = makeHashStore();
  const Config config = commConfig();
  EXPECT_THROW(comm::mpi::createCollectives(worldArgs(config, id, store)), InvalidArgument);
}

TEST(MpiBackend, BarrierWaitsForTheLastProcess) {
  const int n = mpiWorldSize();
  const Identity id = n > 1 ? comm::mpi::worldIdentity() : Identity{};
  auto store = makeHashStore();
  const Config config = commConfig();
  auto control = comm::mpi::createControlChannel(worldArgs(config, id, store));
  constexpr int kStepMs = 150;
  control->barrier();
  const auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(kStepMs * id.rank));
  control->barrier();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  EXPECT_GE(ms, kStepMs * (n - 1) - 20) << "rank " << id.rank << " left the barrier early";
}

TEST(MpiBackend, ChunkedAllreduceMatchesWhole) {
  const int n = mpiWorldSize();
  const Identity id = n > 1 ? comm::mpi::worldIdentity() : Identity{};
  auto store = makeHashStore();
  const Config config = commConfig();
  // 1000-byte pieces: float32 and float16 counts that do not divide evenly.
  comm::mpi::Collectives c(comm::mpi::Context::create(worldArgs(config, id, store), "data"),
                           1000);
  std::vector<float> f(10007);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>((id.rank + 1) * (i % 13));
  c.allreduce(f.data(), f.size(), DataType::kFloat32, ReduceOp::kSum);
  const float ranks = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(f[i], ranks * static_cast<float>(i % 13)) << "element " << i;
  }
  std::vector<int64_t> m(777);
  for (size_t i = 0; i < m.size(); ++i) m[i] = id.rank * 1000 + static_cast<int64_t>(i);
  c.allreduce(m.data(), m.size(), DataType::kInt64, ReduceOp::kMax);
  for (size_t i = 0; i < m.size(); ++i) ASSERT_EQ(m[i], (n - 1) * 1000 + static_cast<int64_t>(i));
}

TEST(MpiBackend, InvalidArgumentsDoNotBreakTheBackend) {
  const int n = mpiWorldSize();
  const Identity id = n > 1 ? comm::mpi::worldIdentity() : Identity{};
  auto store = makeHashStore();
  const Config config = commConfig();
  auto c = comm::mpi::createCollectives(worldArgs(config, id, store));
  std::vector<float> buf(4, 1.0f);
  std::vector<size_t> wrongCounts(n + 1, 1);
  EXPECT_THROW(c->allgatherv(buf.data(), buf.data(), wrongCounts, DataType::kFloat32),
               InvalidArgument);
  EXPECT_THROW(c->broadcast(buf.data(), 4, DataType::kFloat32, n), InvalidArgument);
  EXPECT_THROW(c->allreduce(buf.data(), 4, DataType::kFloat32, ReduceOp::kAverage),
               InvalidArgument);
  EXPECT_THROW(c->allreduce(buf.data(), 4, DataType::kFloat16, ReduceOp::kAverage),
               InvalidArgument);
  c->allreduce(buf.data(), 4, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(buf[0], static_cast<float>(n));
}

// Rank 0 allreduces alone: a Timeout after Config::timeout, then the
// backend fails at once; the others never call. MPI itself stays usable.
TEST(MpiBackend, SilentPeerTimesOut) {
  const int n = mpiWorldSize();
  if (n == 1) GTEST_SKIP() << "needs mpirun -np 2 or more";
  const Identity id = comm::mpi::worldIdentity();
  auto store = makeHashStore();
  Config config = commConfig();
  config.timeout = std::chrono::milliseconds(1000);
  auto c = comm::mpi::createCollectives(worldArgs(config, id, store));
  if (id.rank == 0) {
    std::vector<int64_t> buf(7, 1);
    const auto start = Clock::now();
    try {
      c->allreduce(buf.data(), buf.size(), DataType::kInt64, ReduceOp::kSum);
      ADD_FAILURE() << "allreduce without peers returned";
    } catch (const Timeout& e) {
      EXPECT_NE(std::string(e.what()).find("allreduce"), std::string::npos) << e.what();
    }
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_GE(s, 0.9);
    EXPECT_LT(s, 5.0);
    const auto again = Clock::now();
    EXPECT_THROW(c->allreduce(buf.data(), buf.size(), DataType::kInt64, ReduceOp::kSum),
                 Timeout);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - again).count(), 0.5);
  }
  // The application's communicator is unaffected.
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(sum, n);
}

}  // namespace
}  // namespace kolo::test
