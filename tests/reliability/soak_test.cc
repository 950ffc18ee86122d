// Result integrity under stress: 4 in-process ranks run randomly generated
// steps and check every result against a reference computed here.
//
// Every rank derives the same step plan from (seed, step); only the order in
// which a rank submits a step's tensors is rank-specific. Values are small
// integers (|v| <= 4) so sums over 4 ranks are exact in every dtype.
//
// KOLO_SOAK_STEPS (default 300) and KOLO_SOAK_SEED (default 20240601) select
// the run; a failure names the seed, step, tensor and rank to replay it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <iterator>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/ops_util.h"
#include "harness/harness.h"

namespace kolo::test {
namespace {

constexpr int kRanks = 4;
constexpr uint64_t kDefaultSeed = 20240601;
constexpr int kDefaultSteps = 300;

const DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                            DataType::kBFloat16, DataType::kInt32, DataType::kInt64,
                            DataType::kInt8,    DataType::kUInt8};
const ReduceOp kReduceOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                               ReduceOp::kMax};

uint64_t envOr(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  return std::stoull(text);
}

// One tensor of a step, identical on every rank.
struct TensorPlan {
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduceOp = ReduceOp::kSum;
  int64_t elements = 0;            // allreduce, broadcast
  int64_t width = 1;               // allgather: elements per row
  std::vector<int64_t> rows;       // allgather: first dim on each rank
  int root = 0;                    // broadcast
  bool inPlace = true;
  uint32_t salt = 0;               // varies the values per (step, tensor)
};

struct StepPlan {
  std::vector<TensorPlan> tensors;
  std::vector<bool> joinsEarly;  // join step: ranks that join before the ops
  bool isJoin() const { return !joinsEarly.empty(); }
};

// Mostly small tensors, a few up to 1M elements.
int64_t randomElements(std::mt19937_64& rng) {
  int bucket = static_cast<int>(rng() % 1000);
  if (bucket < 600) return static_cast<int64_t>(rng() % 65);
  if (bucket < 900) return static_cast<int64_t>(64 + rng() % 4000);
  if (bucket < 995) return static_cast<int64_t>(4096 + rng() % 100000);
  return static_cast<int64_t>(100000 + rng() % 900001);
}

StepPlan planStep(uint64_t seed, int step) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(step));
  StepPlan plan;
  if (step > 0 && rng() % 20 == 0) {
    plan.joinsEarly.assign(kRanks, false);
    int early = 1 + static_cast<int>(rng() % (kRanks - 1));  // 1..3 ranks
    std::vector<int> order(kRanks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int i = 0; i < early; ++i) plan.joinsEarly[order[i]] = true;
  }
  int count = 1 + static_cast<int>(rng() % 20);
  for (int k = 0; k < count; ++k) {
    TensorPlan t;
    int kind = static_cast<int>(rng() % 10);
    t.op = kind < 6 ? OpType::kAllreduce : kind < 8 ? OpType::kAllgather : OpType::kBroadcast;
    t.dtype = kDtypes[rng() % std::size(kDtypes)];
    t.reduceOp = kReduceOps[rng() % std::size(kReduceOps)];
    // Averages over joined ranks are not defined the same way everywhere;
    // join steps keep to sum, min and max.
    if (plan.isJoin() && t.reduceOp == ReduceOp::kAverage) t.reduceOp = ReduceOp::kSum;
    t.elements = randomElements(rng);
    t.inPlace = rng() % 2 == 0;
    t.salt = static_cast<uint32_t>(rng());
    if (t.op == OpType::kAllgather) {
      t.width = 1 + static_cast<int64_t>(rng() % 8);
      int64_t maxRows = std::max<int64_t>(1, t.elements / t.width / kRanks);
      for (int r = 0; r < kRanks; ++r) t.rows.push_back(static_cast<int64_t>(rng() % (maxRows + 1)));
    }
    if (t.op == OpType::kBroadcast) {
      do {
        t.root = static_cast<int>(rng() % kRanks);
      } while (plan.isJoin() && plan.joinsEarly[t.root]);
    }
    plan.tensors.push_back(std::move(t));
  }
  return plan;
}

double valueOf(const TensorPlan& t, int rank, int64_t i) {
  uint64_t h = t.salt + static_cast<uint64_t>(rank) * 7 + static_cast<uint64_t>(i) * 3;
  if (t.dtype == DataType::kUInt8) return static_cast<double>(h % 5);
  return static_cast<double>(static_cast<int>(h % 9) - 4);
}

double reduceRef(const TensorPlan& t, const std::vector<bool>& live, int64_t i) {
  double acc = 0;
  int n = 0;
  for (int r = 0; r < kRanks; ++r) {
    if (!live[r]) continue;
    double v = valueOf(t, r, i);
    if (n == 0) {
      acc = v;
    } else if (t.reduceOp == ReduceOp::kMin) {
      acc = std::min(acc, v);
    } else if (t.reduceOp == ReduceOp::kMax) {
      acc = std::max(acc, v);
    } else {
      acc += v;
    }
    ++n;
  }
  if (t.reduceOp == ReduceOp::kAverage) {
    if (isFloatingPoint(t.dtype)) return acc / kRanks;
    return static_cast<double>(static_cast<int64_t>(acc) / kRanks);
  }
  return acc;
}

std::vector<char> fill(const TensorPlan& t, int rank, int64_t n) {
  std::vector<char> buf(static_cast<size_t>(n) * elementSize(t.dtype) + 1);
  for (int64_t i = 0; i < n; ++i) store(t.dtype, buf.data(), i, valueOf(t, rank, i));
  return buf;
}

// What a run covered, summed over ranks (printed at the end).
struct Coverage {
  std::atomic<uint64_t> tensors{0};
  std::atomic<uint64_t> elements{0};
  std::atomic<uint64_t> joins{0};
};
Coverage coverage;

// A submitted tensor and the buffers it writes into; must outlive the handle.
struct Pending {
  int index = 0;
  std::vector<char> input;
  std::vector<char> output;
  Handle handle;
};

[[noreturn]] void fail(uint64_t seed, int step, int tensor, int rank, const TensorPlan& t,
                       const std::string& what) {
  std::ostringstream os;
  os << "soak seed=" << seed << " step=" << step << " tensor=" << tensor << " rank=" << rank
     << " " << toString(t.op) << " " << toString(t.dtype);
  if (t.op == OpType::kAllreduce) os << " " << toString(t.reduceOp);
  os << ": " << what;
  throw std::runtime_error(os.str());
}

void check(uint64_t seed, int step, int k, int rank, const TensorPlan& t,
           const std::vector<bool>& live, Pending& p) {
  const void* out = t.inPlace ? p.input.data() : p.output.data();
  if (t.op == OpType::kAllgather) {
    std::vector<int64_t> shape = p.handle.outputShape();
    int64_t rows = 0;
    for (int r = 0; r < kRanks; ++r) rows += live[r] ? t.rows[r] : 0;
    if (shape.size() != 2 || shape[0] != rows || shape[1] != t.width) {
      fail(seed, step, k, rank, t, "allgather output shape " + describe(t.dtype, shape) +
                                       ", want " + std::to_string(rows) + " rows");
    }
    out = p.output.data();
    int64_t at = 0;
    for (int r = 0; r < kRanks; ++r) {
      if (!live[r]) continue;
      for (int64_t i = 0; i < t.rows[r] * t.width; ++i, ++at) {
        double want = wrapTo(t.dtype, valueOf(t, r, i));
        double got = load(t.dtype, out, static_cast<size_t>(at));
        if (got != want) {
          fail(seed, step, k, rank, t, "element " + std::to_string(at) + " (from rank " +
                                           std::to_string(r) + ") is " + std::to_string(got) +
                                           ", want " + std::to_string(want));
        }
      }
    }
    return;
  }
  for (int64_t i = 0; i < t.elements; ++i) {
    double want = t.op == OpType::kBroadcast ? valueOf(t, t.root, i) : reduceRef(t, live, i);
    want = wrapTo(t.dtype, want);
    double got = load(t.dtype, out, static_cast<size_t>(i));
    if (got != want) {
      fail(seed, step, k, rank, t, "element " + std::to_string(i) + " of " +
                                       std::to_string(t.elements) + " is " +
                                       std::to_string(got) + ", want " + std::to_string(want));
    }
  }
}

// Submits the step's tensors in a rank-specific order, waits, checks.
void runStep(uint64_t seed, int step, const StepPlan& plan, int rank, Engine& engine) {
  std::vector<bool> live(kRanks, true);
  Handle joinHandle;
  if (plan.isJoin()) {
    for (int r = 0; r < kRanks; ++r) live[r] = !plan.joinsEarly[r];
    if (plan.joinsEarly[rank]) {
      coverage.joins++;
      joinHandle = engine.join();
      joinHandle.wait();
      int last = joinHandle.joinResult();
      if (last < 0 || last >= kRanks || !live[last]) {
        throw std::runtime_error("soak seed=" + std::to_string(seed) + " step=" +
                                 std::to_string(step) + " rank=" + std::to_string(rank) +
                                 ": join result " + std::to_string(last) +
                                 " is not a rank that joined last");
      }
      return;
    }
  }
  std::vector<int> order(plan.tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(step * kRanks + rank + 1)));
  std::shuffle(order.begin(), order.end(), rng);

  std::vector<Pending> pending(plan.tensors.size());
  for (int k : order) {
    const TensorPlan& t = plan.tensors[k];
    Pending& p = pending[k];
    p.index = k;
    Request q;
    q.name = "t" + std::to_string(k);
    q.op = t.op;
    q.dtype = t.dtype;
    q.reduceOp = t.reduceOp;
    q.root = t.root;
    Entry e;
    if (t.op == OpType::kAllgather) {
      q.shape = {t.rows[rank], t.width};
      p.input = fill(t, rank, t.rows[rank] * t.width);
      e.input = p.input.data();
      e.allocate = [&p, dtype = t.dtype](const std::vector<int64_t>& shape) {
        p.output.assign(static_cast<size_t>(numElements(shape)) * elementSize(dtype) + 1, 0);
        return static_cast<void*>(p.output.data());
      };
    } else {
      q.shape = {t.elements};
      p.input = fill(t, rank, t.elements);
      if (!t.inPlace) p.output.assign(p.input.size(), 0);
      e.input = p.input.data();
      e.output = t.inPlace ? p.input.data() : p.output.data();
    }
    p.handle = engine.enqueue(std::move(q), std::move(e));
  }
  try {
    for (int k : order) {
      Pending& p = pending[k];
      try {
        p.handle.wait();
      } catch (const std::exception& e) {
        fail(seed, step, k, rank, plan.tensors[k], std::string("failed: ") + e.what());
      }
      check(seed, step, k, rank, plan.tensors[k], live, p);
      coverage.tensors++;
      coverage.elements += p.input.size() / elementSize(plan.tensors[k].dtype);
    }
  } catch (const std::exception& e) {
    // The engine may still write into this step's buffers: fail every rank,
    // then wait until nothing refers to them before they are freed.
    engine.abort(e.what());
    for (Pending& p : pending) {
      try {
        p.handle.wait();
      } catch (const std::exception&) {
      }
    }
    throw;
  }
  if (plan.isJoin()) {
    joinHandle = engine.join();
    joinHandle.wait();
    if (!live[joinHandle.joinResult()]) {
      throw std::runtime_error("soak step " + std::to_string(step) +
                               ": an early rank reported as last to join");
    }
  }
}

TEST(Soak, RandomStepsMatchReference) {
  const uint64_t seed = envOr("KOLO_SOAK_SEED", kDefaultSeed);
  const int steps = static_cast<int>(envOr("KOLO_SOAK_STEPS", kDefaultSteps));
  // Every step's plan is derived on each rank on its own: ranks share nothing
  // but the seed, as data-parallel workers do.
  const auto limit = std::chrono::seconds(120 + steps);
  const auto start = std::chrono::steady_clock::now();
  spawn(kRanks, [&](int rank, Engine& engine) {
    for (int step = 0; step < steps; ++step) runStep(seed, step, planStep(seed, step), rank, engine);
  }, testConfig(), limit);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "soak: seed " << seed << ", " << steps << " steps on " << kRanks << " ranks in "
            << seconds << " s: " << coverage.tensors << " results checked ("
            << coverage.elements << " input elements), " << coverage.joins << " early joins"
            << std::endl;
}

}  // namespace
}  // namespace kolo::test
