// Adasum through real engines (Gloo), N ranks as threads, against a
// reference computed here in float64 from the formula of the Adasum paper.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>

#include "core/ops_util.h"
#include "harness/harness.h"

namespace kolo::test {
namespace {

using Vec = std::vector<double>;

// adasum(a, b) = (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b; a coefficient
// is 1 when its vector is (numerically) zero.
Vec combine(const Vec& a, const Vec& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double tiny = std::sqrt(DBL_MIN);
  const double ca = aa >= tiny ? 1 - dot / (2 * aa) : 1;
  const double cb = bb >= tiny ? 1 - dot / (2 * bb) : 1;
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// The documented tree: ranks p..n-1 fold into 0..n-p-1 (p the largest power
// of two <= n), then (0,1),(2,3),... then (0,2),... as in Horovod.
Vec reference(std::vector<Vec> v) {
  const int n = static_cast<int>(v.size());
  int p = 1;
  while (p * 2 <= n) p *= 2;
  for (int i = 0; i + p < n; ++i) v[i] = combine(v[i], v[p + i]);
  for (int step = 1; step < p; step *= 2) {
    for (int k = 0; k + step < p; k += 2 * step) v[k] = combine(v[k], v[k + step]);
  }
  return v[0];
}

// Rank r's tensor t: deterministic pseudo-random values.
Vec tensorOf(int rank, size_t tensor, size_t n) {
  std::mt19937 gen(static_cast<unsigned>(1000 * rank + tensor));
  std::normal_distribution<double> dist(0.0, 1.0);
  Vec v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

class AdasumOps : public ::testing::TestWithParam<std::tuple<int, DataType>> {};

// Several tensors fused into one response (each its own vector), of sizes
// that do not divide evenly by the number of ranks, including 0 and 1.
TEST_P(AdasumOps, FusedTensorsMatchTheReferenceTree) {
  const auto [size, dtype] = GetParam();
  const std::vector<size_t> sizes = {37, 1, 0, 300, 5};
  const double tol = dtype == DataType::kFloat16   ? 5e-3
                     : dtype == DataType::kFloat32 ? 1e-5
                                                   : 1e-12;
  spawn(size, [&](int rank, Engine& engine) {
    std::vector<std::vector<char>> bufs;
    std::vector<Request> requests;
    std::vector<Entry> entries;
    for (size_t t = 0; t < sizes.size(); ++t) {
      bufs.emplace_back(sizes[t] * elementSize(dtype) + 1);
      const Vec v = tensorOf(rank, t, sizes[t]);
      for (size_t i = 0; i < sizes[t]; ++i) store(dtype, bufs[t].data(), i, v[i]);
    }
    for (size_t t = 0; t < sizes.size(); ++t) {
      requests.push_back(makeRequest("adasum." + std::to_string(t), OpType::kAllreduce, dtype,
                                     {static_cast<int64_t>(sizes[t])}, ReduceOp::kAdasum));
      entries.push_back(inPlace(bufs[t]));
    }
    // A group: negotiated and fused as one response.
    for (Handle& h : engine.enqueueGroup(requests, entries)) h.wait();
    for (size_t t = 0; t < sizes.size(); ++t) {
      std::vector<Vec> all;
      for (int r = 0; r < size; ++r) {
        Vec v = tensorOf(r, t, sizes[t]);
        for (double& x : v) x = wrapTo(dtype, x);  // what the rank actually sent
        all.push_back(v);
      }
      const Vec want = reference(all);
      double norm = 0;
      for (double x : want) norm = std::max(norm, std::fabs(x));
      for (size_t i = 0; i < sizes[t]; ++i) {
        ASSERT_NEAR(load(dtype, bufs[t].data(), i), want[i], tol * std::max(1.0, norm))
            << "size " << size << " " << toString(dtype) << " tensor " << t << " i=" << i;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AdasumOps,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5),
                                            ::testing::Values(DataType::kFloat32,
                                                              DataType::kFloat64,
                                                              DataType::kFloat16)),
                         [](const auto& info) {
                           return "np" + std::to_string(std::get<0>(info.param)) + "_" +
                                  toString(std::get<1>(info.param));
                         });

// The paper's two limits: orthogonal gradients add up, parallel ones (on a
// power-of-two size) average. Prescale and postscale still apply; a joined
// rank contributes zeros, which Adasum leaves out.
TEST(Adasum, OrthogonalSumParallelAverageScalesAndJoin) {
  const int size = 4;
  spawn(size, [&](int rank, Engine& engine) {
    std::vector<double> orth(size, 0.0);
    orth[rank] = rank + 1.0;  // e_r * (r+1)
    std::vector<double> par(6);
    for (size_t i = 0; i < par.size(); ++i) par[i] = (rank + 1.0) * (i + 1.0);
    Request qo =
        makeRequest("orth", OpType::kAllreduce, DataType::kFloat64, {size}, ReduceOp::kAdasum);
    Request qp = makeRequest("par", OpType::kAllreduce, DataType::kFloat64, {6}, ReduceOp::kAdasum);
    qp.prescale = 2.0;
    qp.postscale = 0.25;
    Handle ho = engine.enqueue(qo, Entry{orth.data(), orth.data(), {}, {}});
    Handle hp = engine.enqueue(qp, Entry{par.data(), par.data(), {}, {}});
    ho.wait();
    hp.wait();
    for (int r = 0; r < size; ++r) EXPECT_NEAR(orth[r], r + 1.0, 1e-12) << r;
    // mean of (r+1) over 4 ranks = 2.5; times 2 * 0.25
    for (size_t i = 0; i < par.size(); ++i) EXPECT_NEAR(par[i], 2.5 * (i + 1.0) * 0.5, 1e-12);

    // Ranks 1 and 3 join: the others' vectors combine as if alone.
    std::vector<double> v = {rank == 0 ? 1.0 : 0.0, rank == 2 ? 1.0 : 0.0};
    if (rank == 1 || rank == 3) {
      engine.join().wait();
      return;
    }
    engine
        .enqueue(
            makeRequest("joined", OpType::kAllreduce, DataType::kFloat64, {2}, ReduceOp::kAdasum),
            Entry{v.data(), v.data(), {}, {}})
        .wait();
    EXPECT_NEAR(v[0], 1.0, 1e-12);
    EXPECT_NEAR(v[1], 1.0, 1e-12);
    engine.join().wait();
  });
}

}  // namespace
}  // namespace kolo::test
