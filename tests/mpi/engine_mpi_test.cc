// Engine-level behaviour with KOLO_CONTROLLER=mpi and KOLO_CPU_OPERATIONS=mpi,
// as an mpirun job (ctest label mpi, -np 2 and -np 3): every dtype through
// the engine, fusion, the response cache's steady state, mismatch errors on
// every rank, join, process sets, kolo::init() under mpirun, and a rank that
// aborts.
//
// The application initialises MPI itself here (MPI_Init_thread SERIALIZED):
// kolo must use it and leave finalising to the application.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/mpi_world.h"
#include "core/ops_util.h"
#include "harness/harness.h"
#include "kolo/kolo.h"

namespace kolo::test {
namespace {

Config mpiConfig() {
  Config config = testConfig();
  config.controller = "mpi";
  config.cpuOperations = "mpi";
  config.timeout = std::chrono::seconds(20);
  return config;
}

// One engine per process over MPI; the store only holds this process's own
// bookkeeping keys.
std::unique_ptr<Engine> mpiEngine(const Config& config = mpiConfig()) {
  return std::make_unique<Engine>(config, launchInfoFromEnv().identity, makeHashStore());
}

Handle allreduceFloats(Engine& engine, const std::string& name, std::vector<float>& v,
                       ReduceOp op = ReduceOp::kSum) {
  return engine.enqueue(makeRequest(name, OpType::kAllreduce, DataType::kFloat32,
                                    {static_cast<int64_t>(v.size())}, op),
                        Entry{v.data(), v.data(), {}, {}});
}

TEST(EngineMpi, AllreduceEveryDtypeAndOp) {
  auto engine = mpiEngine();
  const int n = engine->size(), rank = engine->rank();
  const DataType dtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                             DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                             DataType::kInt8,    DataType::kUInt8,   DataType::kBool,
                             DataType::kInt16};
  for (DataType dtype : dtypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      const size_t count = 1000;
      auto buf = makeBuffer(dtype, count, rank, op);
      const std::string name = std::string("t.") + toString(dtype) + "." + toString(op);
      engine->enqueue(makeRequest(name, OpType::kAllreduce, dtype, {int64_t(count)}, op),
                      inPlace(buf))
          .wait();
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(load(dtype, buf.data(), i), reference(op, dtype, n, i))
            << name << " element " << i;
      }
    }
  }
}

// Adasum over MPI's data plane, two tensors fused: orthogonal gradients add
// up; parallel ones (g_r = (r+1) v) combine like averages up the documented
// tree (ranks p.. fold into 0.., then pairs), which is the plain average for
// a power-of-two size.
TEST(EngineMpi, AdasumOrthogonalAddsParallelAverages) {
  auto engine = mpiEngine();
  const int n = engine->size(), rank = engine->rank();
  std::vector<float> orth(static_cast<size_t>(n), 0.0f);
  orth[static_cast<size_t>(rank)] = 1.0f + rank;
  std::vector<float> par = {1.0f * (rank + 1), -2.0f * (rank + 1), 0.5f * (rank + 1)};
  std::vector<Request> q = {
      makeRequest("adasum.orth", OpType::kAllreduce, DataType::kFloat32, {n}, ReduceOp::kAdasum),
      makeRequest("adasum.par", OpType::kAllreduce, DataType::kFloat32, {3}, ReduceOp::kAdasum)};
  for (Handle& h : engine->enqueueGroup(q, {Entry{orth.data(), orth.data(), {}, {}},
                                            Entry{par.data(), par.data(), {}, {}}})) {
    h.wait();
  }
  for (int r = 0; r < n; ++r) EXPECT_NEAR(orth[static_cast<size_t>(r)], 1.0f + r, 1e-6) << r;
  std::vector<double> w(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) w[static_cast<size_t>(r)] = r + 1.0;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  for (int i = 0; i + p < n; ++i) w[i] = (w[i] + w[p + i]) / 2;
  for (int step = 1; step < p; step *= 2) {
    for (int k = 0; k + step < p; k += 2 * step) w[k] = (w[k] + w[k + step]) / 2;
  }
  EXPECT_NEAR(par[0], 1.0 * w[0], 1e-5);
  EXPECT_NEAR(par[1], -2.0 * w[0], 1e-5);
  EXPECT_NEAR(par[2], 0.5 * w[0], 1e-5);
}

TEST(EngineMpi, AllgatherAndBroadcast) {
  auto engine = mpiEngine();
  const int n = engine->size(), rank = engine->rank();
  std::vector<float> rows(3 * (rank + 1), static_cast<float>(rank));
  std::vector<float> out;
  Entry e;
  e.input = rows.data();
  e.allocate = [&](const std::vector<int64_t>& shape) {
    out.resize(static_cast<size_t>(numElements(shape)));
    return static_cast<void*>(out.data());
  };
  Handle h = engine->enqueue(
      makeRequest("gather", OpType::kAllgather, DataType::kFloat32, {rank + 1, 3}), e);
  h.wait();
  ASSERT_EQ(h.outputShape()[0], n * (n + 1) / 2);
  size_t at = 0;
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < 3 * (r + 1); ++k) ASSERT_EQ(out[at++], static_cast<float>(r));
  }
  std::vector<float> b(5, static_cast<float>(rank));
  Request q = makeRequest("bcast", OpType::kBroadcast, DataType::kFloat32, {5});
  q.root = n - 1;
  engine->enqueue(q, Entry{b.data(), b.data(), {}, {}}).wait();
  EXPECT_EQ(b[4], static_cast<float>(n - 1));
}

TEST(EngineMpi, GroupIsFusedIntoOneBackendCall) {
  auto engine = mpiEngine();
  const int n = engine->size(), rank = engine->rank();
  std::vector<std::vector<float>> bufs(16, std::vector<float>(1000, 1.0f + rank));
  std::vector<Request> reqs;
  std::vector<Entry> entries;
  for (size_t k = 0; k < bufs.size(); ++k) {
    reqs.push_back(makeRequest("g" + std::to_string(k), OpType::kAllreduce, DataType::kFloat32,
                               {1000}));
    entries.push_back(Entry{bufs[k].data(), bufs[k].data(), {}, {}});
  }
  const auto before = engine->stats();
  for (const Handle& h : engine->enqueueGroup(reqs, entries)) h.wait();
  const auto after = engine->stats();
  EXPECT_EQ(after.backendCalls - before.backendCalls, 1u);
  EXPECT_EQ(after.fusedTensors - before.fusedTensors, 16u);
  for (auto& b : bufs) ASSERT_EQ(b[999], static_cast<float>(n * (n + 1) / 2));
}

TEST(EngineMpi, CacheSteadyStateSkipsTheCoordinator) {
  auto engine = mpiEngine();
  const int n = engine->size();
  std::vector<std::vector<float>> bufs(8, std::vector<float>(100, 1.0f));
  auto step = [&] {
    std::vector<Handle> handles;
    for (size_t k = 0; k < bufs.size(); ++k) {
      std::fill(bufs[k].begin(), bufs[k].end(), 1.0f);
      handles.push_back(allreduceFloats(*engine, "w" + std::to_string(k), bufs[k]));
    }
    for (const Handle& h : handles) h.wait();
  };
  step();  // negotiated, then cached
  const auto before = engine->stats();
  for (int i = 0; i < 5; ++i) {
    step();
    ASSERT_EQ(bufs[3][5], static_cast<float>(n));
  }
  const auto after = engine->stats();
  EXPECT_EQ(after.coordinatorRounds, before.coordinatorRounds);
  EXPECT_EQ(after.cachedResponses - before.cachedResponses, 40u);
}

TEST(EngineMpi, MismatchFailsOnEveryRankAndTheEngineGoesOn) {
  auto engine = mpiEngine();
  const int n = engine->size(), rank = engine->rank();
  std::vector<float> v(rank + 1, 1.0f);
  Handle h = allreduceFloats(*engine, "odd", v);
  try {
    h.wait();
    ADD_FAILURE() << "shapes differ across ranks but the allreduce succeeded";
  } catch (const Mismatch& e) {
    EXPECT_NE(std::string(e.what()).find("odd"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << e.what();
  }
  std::vector<float> ok(4, 1.0f);
  allreduceFloats(*engine, "fine", ok).wait();
  EXPECT_EQ(ok[3], static_cast<float>(n));
}

TEST(EngineMpi, JoinedRankContributesZeros) {
  auto engine = mpiEngine();
  const int n = engine->size(), rank = engine->rank();
  if (rank != 0) {
    std::vector<float> v(6, 1.0f);
    allreduceFloats(*engine, "j", v).wait();
    EXPECT_EQ(v[0], static_cast<float>(n - 1)) << "rank 0 joined and must add zeros";
  }
  Handle j = engine->join();
  j.wait();
  EXPECT_NE(j.joinResult(), 0) << "rank 0 joined first";
  std::vector<float> after(2, 1.0f);
  allreduceFloats(*engine, "after", after).wait();
  EXPECT_EQ(after[0], static_cast<float>(n));
}

// Process sets over MPI sub-communicators (MPI_Comm_create_group among the
// members): a static set and an added one, used only by their members.
TEST(EngineMpi, ProcessSetsUseCommunicatorsOfTheirMembers) {
  const int worldSize = launchInfoFromEnv().identity.size;
  std::vector<int> last = {worldSize - 1};
  auto engine = std::make_unique<Engine>(mpiConfig(), launchInfoFromEnv().identity,
                                         makeHashStore(), std::vector<std::vector<int>>{last});
  const int n = engine->size(), rank = engine->rank();
  std::vector<int> evens;
  for (int r = 0; r < n; r += 2) evens.push_back(r);
  const int even = engine->addProcessSet(evens);
  EXPECT_EQ(even, 2);
  if (rank % 2 == 0) {
    std::vector<float> v(4, static_cast<float>(rank));
    Request q = makeRequest("ps", OpType::kAllreduce, DataType::kFloat32, {4});
    q.processSet = even;
    engine->enqueue(q, Entry{v.data(), v.data(), {}, {}}).wait();
    float expect = 0;
    for (int r : evens) expect += static_cast<float>(r);
    EXPECT_EQ(v[3], expect);
    std::vector<float> rows(2, static_cast<float>(rank)), out;
    Request g = makeRequest("ps.gather", OpType::kAllgather, DataType::kFloat32, {1, 2});
    g.processSet = even;
    Entry e;
    e.input = rows.data();
    e.allocate = [&](const std::vector<int64_t>& shape) {
      out.resize(static_cast<size_t>(numElements(shape)));
      return static_cast<void*>(out.data());
    };
    engine->enqueue(g, e).wait();
    ASSERT_EQ(out.size(), 2 * evens.size());
    EXPECT_EQ(out.back(), static_cast<float>(evens.back()));
  }
  if (rank == n - 1) {
    std::vector<float> v(2, 5.0f);
    Request q = makeRequest("solo", OpType::kAllreduce, DataType::kFloat32, {2});
    q.processSet = 1;
    engine->enqueue(q, Entry{v.data(), v.data(), {}, {}}).wait();
    EXPECT_EQ(v[0], 5.0f);
  }
  engine->removeProcessSet(even);
  engine->barrier().wait();
}

// No KOLO_* variable and no MASTER_ADDR: mpirun means MPI for both planes
// and no store.
TEST(EngineMpi, InitUnderMpirunDefaultsToMpi) {
  kolo::init();
  Engine& engine = kolo::defaultEngine();
  EXPECT_EQ(engine.config().controller, "mpi");
  EXPECT_EQ(engine.config().cpuOperations, "mpi");
  std::vector<float> v(3, 2.0f);
  allreduceFloats(engine, "init", v).wait();
  EXPECT_EQ(v[2], 2.0f * engine.size());
  kolo::shutdown();
}

// Last: the aborting rank leaves MPI communicators behind mid-protocol.
TEST(EngineMpi, ARankThatAbortsFailsTheOthersWithItsMessage) {
  auto engine = mpiEngine();
  const int n = engine->size(), rank = engine->rank();
  if (rank == n - 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    engine->abort("simulated out of memory");
    return;
  }
  std::vector<float> v(4, 1.0f);
  try {
    allreduceFloats(*engine, "never", v).wait();
    ADD_FAILURE() << "the last rank aborted but the allreduce succeeded";
  } catch (const PeerFailure& e) {
    EXPECT_EQ(std::string(e.what()),
              "rank " + std::to_string(n - 1) + " failed: simulated out of memory");
  }
}

}  // namespace
}  // namespace kolo::test

int main(int argc, char** argv) {
  return kolo::test::runMpiTests(argc, argv, /*appInitialisesMpi=*/true);
}
