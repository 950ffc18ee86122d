// Every operation x dtype x reduce op through real engines, N ranks as
// threads, checked against references computed here. Placements: all ranks
// on one host (the shared-memory data plane), two ranks per "host"
// (hierarchical at 4 ranks, the flat fallback at 3: hosts of 2 and 1), and
// shared memory off (Gloo).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <tuple>

#include "core/ops_util.h"
#include "harness/harness.h"

namespace kolo::test {
namespace {

const DataType kAllDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                               DataType::kBFloat16, DataType::kInt32,  DataType::kInt64,
                               DataType::kInt8,    DataType::kUInt8,  DataType::kBool,
                               DataType::kInt16};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kProduct};

double tolerance(DataType dtype) {
  if (dtype == DataType::kFloat16) return 2e-3;
  if (dtype == DataType::kBFloat16) return 1e-2;
  return 1e-6;
}

std::string label(const std::string& what, int size, DataType dtype, ReduceOp op, size_t n) {
  return what + " size=" + std::to_string(size) + " " + toString(dtype) + " " + toString(op) +
         " n=" + std::to_string(n);
}

enum class Placement { kOneHost, kTwoPerHost, kNoSharedMemory };

Config configFor(Placement placement) {
  Config config = testConfig();
  if (placement == Placement::kTwoPerHost) {
    config.hostKeyOverride = [](int rank) { return "host " + std::to_string(rank / 2); };
  }
  if (placement == Placement::kNoSharedMemory) config.shm = false;
  return config;
}

class EngineOps : public ::testing::TestWithParam<std::tuple<int, DataType, Placement>> {};

TEST_P(EngineOps, AllreduceMatchesReference) {
  const auto [size, dtype, placement] = GetParam();
  const std::vector<size_t> counts = {0, 1, 7, 1027};
  spawn(size, [&, size = size, dtype = dtype](int rank, Engine& engine) {
    for (ReduceOp op : kAllOps) {
      if (dtype == DataType::kBool && op == ReduceOp::kAverage) continue;
      std::vector<std::vector<char>> bufs;
      std::vector<Handle> handles;
      for (size_t n : counts) {
        bufs.push_back(makeBuffer(dtype, n, rank, op));
      }
      for (size_t k = 0; k < counts.size(); ++k) {
        handles.push_back(engine.enqueue(
            makeRequest("t" + std::to_string(k), OpType::kAllreduce, dtype,
                        {static_cast<int64_t>(counts[k])}, op),
            inPlace(bufs[k])));
      }
      for (size_t k = 0; k < counts.size(); ++k) {
        handles[k].wait();
        for (size_t i = 0; i < counts[k]; ++i) {
          double want = wrapTo(dtype, reference(op, dtype, size, i));
          double got = load(dtype, bufs[k].data(), i);
          ASSERT_NEAR(got, want, tolerance(dtype) * std::max(1.0, std::fabs(want)))
              << label("allreduce", size, dtype, op, counts[k]) << " i=" << i;
        }
      }
    }
  }, configFor(placement));
}

TEST_P(EngineOps, BroadcastAllgatherAlltoallReducescatter) {
  const auto [size, dtype, placement] = GetParam();
  spawn(size, [&, size = size, dtype = dtype](int rank, Engine& engine) {
    // broadcast from every root, out of place
    for (int root = 0; root < size; ++root) {
      auto in = makeBuffer(dtype, 5, rank);
      std::vector<char> out(in.size(), 0);
      Request q = makeRequest("bcast", OpType::kBroadcast, dtype, {5});
      q.root = root;
      Entry e;
      e.input = in.data();
      e.output = out.data();
      engine.enqueue(q, e).wait();
      for (size_t i = 0; i < 5; ++i) {
        ASSERT_EQ(load(dtype, out.data(), i), wrapTo(dtype, valueFor(root, i, dtype)))
            << "broadcast root " << root;
      }
    }
    // allgather: rank r contributes r+1 rows of 3 (rank 0 of size>2: 0 rows)
    const int64_t rows = (size > 2 && rank == 0) ? 0 : rank + 1;
    auto in = makeBuffer(dtype, static_cast<size_t>(rows * 3), rank);
    std::vector<char> out;
    Entry e;
    e.input = in.data();
    e.allocate = [&](const std::vector<int64_t>& shape) {
      out.resize(static_cast<size_t>(numElements(shape)) * elementSize(dtype) + 1);
      return static_cast<void*>(out.data());
    };
    Handle h = engine.enqueue(makeRequest("gather", OpType::kAllgather, dtype, {rows, 3}), e);
    h.wait();
    size_t pos = 0;
    int64_t total = 0;
    for (int r = 0; r < size; ++r) {
      int64_t rr = (size > 2 && r == 0) ? 0 : r + 1;
      total += rr;
      for (size_t i = 0; i < static_cast<size_t>(rr * 3); ++i, ++pos) {
        ASSERT_EQ(load(dtype, out.data(), pos), wrapTo(dtype, valueFor(r, i, dtype)))
            << "allgather from rank " << r;
      }
    }
    EXPECT_EQ(h.outputShape(), (std::vector<int64_t>{total, 3}));

    // alltoall: rank r sends (j+1) rows of 2 to rank j
    std::vector<int64_t> splits(size);
    int64_t sendRows = 0;
    for (int j = 0; j < size; ++j) sendRows += (splits[j] = j + 1);
    std::vector<char> send(static_cast<size_t>(sendRows * 2) * elementSize(dtype) + 1);
    for (size_t i = 0; i < static_cast<size_t>(sendRows * 2); ++i) {
      store(dtype, send.data(), i, valueFor(rank, i, dtype));
    }
    std::vector<char> recv;
    Request aq = makeRequest("a2a", OpType::kAlltoall, dtype, {sendRows, 2});
    aq.splits = splits;
    Entry ae;
    ae.input = send.data();
    ae.allocate = [&](const std::vector<int64_t>& shape) {
      recv.resize(static_cast<size_t>(numElements(shape)) * elementSize(dtype) + 1);
      return static_cast<void*>(recv.data());
    };
    Handle ah = engine.enqueue(aq, ae);
    ah.wait();
    EXPECT_EQ(ah.outputShape(), (std::vector<int64_t>{static_cast<int64_t>(size) * (rank + 1), 2}));
    size_t rpos = 0;
    for (int src = 0; src < size; ++src) {
      size_t offset = 0;
      for (int j = 0; j < rank; ++j) offset += static_cast<size_t>(j + 1) * 2;
      for (size_t i = 0; i < static_cast<size_t>(rank + 1) * 2; ++i, ++rpos) {
        ASSERT_EQ(load(dtype, recv.data(), rpos), wrapTo(dtype, valueFor(src, offset + i, dtype)))
            << "alltoall from " << src;
      }
    }

    // reducescatter (sum) of 2*size+1 rows of 2 elements
    if (dtype != DataType::kBool) {
      const int64_t rsRows = 2 * size + 1;
      auto rsIn = makeBuffer(dtype, static_cast<size_t>(rsRows * 2), rank);
      std::vector<char> rsOut;
      Entry re;
      re.input = rsIn.data();
      re.allocate = [&](const std::vector<int64_t>& shape) {
        rsOut.resize(static_cast<size_t>(numElements(shape)) * elementSize(dtype) + 1);
        return static_cast<void*>(rsOut.data());
      };
      Handle rh = engine.enqueue(makeRequest("rs", OpType::kReducescatter, dtype, {rsRows, 2}), re);
      rh.wait();
      int64_t myRows = rsRows / size + (rank < rsRows % size ? 1 : 0);
      int64_t firstRow = 0;
      for (int r = 0; r < rank; ++r) firstRow += rsRows / size + (r < rsRows % size ? 1 : 0);
      EXPECT_EQ(rh.outputShape(), (std::vector<int64_t>{myRows, 2}));
      for (size_t i = 0; i < static_cast<size_t>(myRows * 2); ++i) {
        size_t gi = static_cast<size_t>(firstRow * 2) + i;
        ASSERT_NEAR(load(dtype, rsOut.data(), i), wrapTo(dtype, reference(ReduceOp::kSum, dtype, size, gi)),
                    tolerance(dtype) * 8)
            << "reducescatter element " << gi;
      }
    }
  }, configFor(placement));
}

std::string opsName(const ::testing::TestParamInfo<std::tuple<int, DataType, Placement>>& info) {
  return std::string("np") + std::to_string(std::get<0>(info.param)) + "_" +
         toString(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Sizes, EngineOps,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::ValuesIn(kAllDtypes),
                                            ::testing::Values(Placement::kOneHost)),
                         opsName);
INSTANTIATE_TEST_SUITE_P(TwoPerHost, EngineOps,
                         ::testing::Combine(::testing::Values(3, 4),
                                            ::testing::ValuesIn(kAllDtypes),
                                            ::testing::Values(Placement::kTwoPerHost)),
                         opsName);
INSTANTIATE_TEST_SUITE_P(NoSharedMemory, EngineOps,
                         ::testing::Combine(::testing::Values(2, 3),
                                            ::testing::ValuesIn(kAllDtypes),
                                            ::testing::Values(Placement::kNoSharedMemory)),
                         opsName);

// Horovod's scaling rules, written out independently of kolo's reduce.cc:
// each rank scales its input (integers in float64 truncated, float16/bfloat16
// in float32, float32 in float32), the sum is taken in the dtype, then the
// postscale (average: postscale / size; integers without a postscale: an
// exact truncating division).
double horovodScale(DataType dtype, double v, double f) {
  switch (dtype) {
    case DataType::kFloat32:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return wrapTo(dtype, static_cast<float>(v) * static_cast<float>(f));
    case DataType::kFloat64: return v * f;
    default: return wrapTo(dtype, std::trunc(v * f));
  }
}

class EngineScaling : public ::testing::TestWithParam<int> {};

TEST_P(EngineScaling, IntegerAndHalfScalesLikeHorovodOnAllreduceGroupsAndReducescatter) {
  const int size = GetParam();
  const DataType dtypes[] = {DataType::kInt64, DataType::kInt32, DataType::kInt16,
                             DataType::kInt8,  DataType::kUInt8, DataType::kFloat16,
                             DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
  const size_t n = 2 * static_cast<size_t>(size) + 3;  // rows of one element
  auto valueOf = [](DataType dtype, int rank, size_t i) {
    const int v = static_cast<int>((rank * 37 + i * 11) % 41) - 20;  // -20..20
    return dtype == DataType::kUInt8 ? std::abs(v) : v;
  };
  spawn(size, [&](int rank, Engine& engine) {
    for (DataType dtype : dtypes) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        for (double post : {1.0, 1.7}) {
          const double pre = 0.37;
          auto expected = [&](size_t i) {
            // Summed in rank order, rounded to the dtype at each step (the
            // order of Gloo's small-message allreduce).
            double sum = horovodScale(dtype, valueOf(dtype, 0, i), pre);
            for (int r = 1; r < size; ++r) {
              sum = wrapTo(dtype, sum + horovodScale(dtype, valueOf(dtype, r, i), pre));
            }
            if (op == ReduceOp::kAverage && !isFloatingPoint(dtype) && post == 1.0) {
              return static_cast<double>(static_cast<int64_t>(sum) / size);
            }
            return horovodScale(dtype, sum, op == ReduceOp::kAverage ? post / size : post);
          };
          std::vector<char> a(n * elementSize(dtype)), g(n * elementSize(dtype)),
              rs(n * elementSize(dtype));
          for (size_t i = 0; i < n; ++i) {
            store(dtype, a.data(), i, valueOf(dtype, rank, i));
            store(dtype, g.data(), i, valueOf(dtype, rank, i));
          }
          const std::string tag = std::string(toString(dtype)) + toString(op) +
                                  std::to_string(post);
          Request q = makeRequest("scale." + tag, OpType::kAllreduce, dtype,
                                  {static_cast<int64_t>(n)}, op);
          q.prescale = pre;
          q.postscale = post;
          // Grouped: two tensors fused with the plain one's twin.
          Request g0 = q, g1 = q;
          g0.name = "scale.g0." + tag;
          g1.name = "scale.g1." + tag;
          std::vector<char> g1buf = a;
          Handle h = engine.enqueue(q, inPlace(a));
          std::vector<Handle> gh = engine.enqueueGroup({g0, g1}, {inPlace(g), inPlace(g1buf)});
          Request r = q;
          r.name = "scale.rs." + tag;
          r.op = OpType::kReducescatter;
          std::vector<char> rsIn(n * elementSize(dtype));
          for (size_t i = 0; i < n; ++i) store(dtype, rsIn.data(), i, valueOf(dtype, rank, i));
          Entry re;
          re.input = rsIn.data();
          re.allocate = [&](const std::vector<int64_t>&) { return static_cast<void*>(rs.data()); };
          Handle rh = engine.enqueue(r, re);
          h.wait();
          for (auto& x : gh) x.wait();
          rh.wait();
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(load(dtype, a.data(), i), expected(i)) << tag << " allreduce i=" << i;
            ASSERT_EQ(load(dtype, g.data(), i), expected(i)) << tag << " grouped i=" << i;
            ASSERT_EQ(load(dtype, g1buf.data(), i), expected(i)) << tag << " grouped i=" << i;
          }
          const int64_t mine = rh.outputShape()[0];
          int64_t first = 0;
          const int64_t rows = static_cast<int64_t>(n);
          for (int k = 0; k < rank; ++k) first += rows / size + (k < rows % size ? 1 : 0);
          for (int64_t i = 0; i < mine; ++i) {
            // The ring reduce-scatter sums in another order: 16-bit floats may
            // round differently there.
            const double want = expected(static_cast<size_t>(first + i));
            ASSERT_NEAR(load(dtype, rs.data(), static_cast<size_t>(i)), want,
                        4 * tolerance(dtype) * std::max(1.0, std::fabs(want)))
                << tag << " reducescatter row " << first + i;
          }
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, EngineScaling, ::testing::Values(2, 3),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

TEST(EngineOpsLarge, EightRanksLargeFloatAverageWithScales) {
  const size_t n = (1 << 18) + 3;
  spawn(8, [&](int rank, Engine& engine) {
    std::vector<float> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<float>(rank + (i % 5));
    Request q = makeRequest("big", OpType::kAllreduce, DataType::kFloat32,
                            {static_cast<int64_t>(n)}, ReduceOp::kAverage);
    q.prescale = 2.0;
    q.postscale = 0.5;
    Entry e;
    e.input = data.data();
    e.output = data.data();
    engine.enqueue(q, e).wait();
    for (size_t i = 0; i < n; i += 997) {
      // mean over ranks of (r + i%5) = 3.5 + i%5
      ASSERT_NEAR(data[i], 3.5f + static_cast<float>(i % 5), 1e-5) << i;
    }
  });
}

// The data plane each engine builds, as its log says, for a placement.
std::vector<std::string> dataPlaneLines(int size, Config config) {
  std::mutex mu;
  std::vector<std::string> lines;
  config.logLevel = LogLevel::kDebug;
  config.logSink = [&](LogLevel level, const std::string& line) {
    if (line.find("cpu data plane") == std::string::npos && level < LogLevel::kWarning) return;
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  };
  spawn(size, [](int, Engine&) {}, config);
  return lines;
}

bool anyHas(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& l : lines) {
    if (l.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(EngineDataPlane, ChosenByWhereTheRanksRun) {
  auto lines = dataPlaneLines(2, configFor(Placement::kOneHost));
  EXPECT_TRUE(anyHas(lines, "cpu data plane shm (2 ranks on one host)")) << lines.front();
  lines = dataPlaneLines(4, configFor(Placement::kTwoPerHost));
  EXPECT_TRUE(anyHas(lines, "cpu data plane hierarchical (2 hosts of 2 ranks: shm within hosts, "
                            "gloo across them; allreduce two-level, allgather/broadcast "
                            "two-level)"))
      << lines.front();
  lines = dataPlaneLines(3, configFor(Placement::kTwoPerHost));
  EXPECT_TRUE(anyHas(lines, "cpu data plane gloo (hosts of 2 and 1 ranks: hierarchical "
                            "collectives need the same number of ranks on every host)"))
      << lines.front();
  EXPECT_FALSE(anyHas(lines, "KOLO_HIERARCHICAL_*"));
  lines = dataPlaneLines(2, configFor(Placement::kNoSharedMemory));
  EXPECT_TRUE(anyHas(lines, "cpu data plane gloo (shared memory off)")) << lines.front();
}

TEST(EngineDataPlane, AskedForHierarchicalOnUnevenHostsWarnsAndFallsBack) {
  Config config = configFor(Placement::kTwoPerHost);
  config.hierarchicalAllreduce = true;
  auto lines = dataPlaneLines(3, config);
  EXPECT_TRUE(anyHas(lines, "[warning] cpu data plane: gloo (hosts of 2 and 1 ranks: "
                            "hierarchical collectives need the same number of ranks on every "
                            "host; KOLO_HIERARCHICAL_*=1 cannot apply)"))
      << lines.front();
}

// Shared memory that cannot be set up (here: a file-size limit below the
// data segment's size, as a full /dev/shm would refuse it) is reported to
// every rank, and every rank falls back to the network data plane.
TEST(EngineDataPlane, SharedMemorySetupFailureFallsBackToTheNetworkOnEveryRank) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* previous = signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 1 << 20;  // the control segment fits, the data segment does not
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::vector<std::string> lines;
  std::vector<float> sums(2);
  {
    Config config = configFor(Placement::kOneHost);
    std::mutex mu;
    config.logLevel = LogLevel::kDebug;
    config.logSink = [&](LogLevel level, const std::string& line) {
      if (line.find("cpu data plane") == std::string::npos && level < LogLevel::kWarning) return;
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(line);
    };
    spawn(
        2,
        [&](int rank, Engine& engine) {
          float x = static_cast<float>(rank + 1);
          engine.enqueue(makeRequest("x", OpType::kAllreduce, DataType::kFloat32, {1}),
                         Entry{&x, &x, {}, {}})
              .wait();
          sums[rank] = x;
        },
        config);
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, previous);
  EXPECT_EQ(sums, (std::vector<float>{3.0f, 3.0f}));
  EXPECT_TRUE(anyHas(lines, "[warning] cpu data plane: gloo (shared memory unavailable: shm data "
                            "setup failed: rank 0: shm: cannot reserve"))
      << (lines.empty() ? "" : lines.front());
  int fellBack = 0;
  for (const auto& l : lines) fellBack += l.find("cpu data plane gloo (shared memory unavailable") != std::string::npos;
  EXPECT_EQ(fellBack, 2) << "every rank falls back";
}

}  // namespace
}  // namespace kolo::test
