// Autotuner: converges in a bounded number of settings to the best one (on
// a synthetic throughput model and on a real workload where small fusion
// thresholds are clearly worse), logs every sample, and every rank applies
// identical tunables at identical cycles.
#include <gtest/gtest.h>

#include <spdlog/sinks/null_sink.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "autotune/autotuner.h"
#include "core/ops_util.h"
#include "harness/harness.h"

namespace kolo::test {
namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<spdlog::logger> quietLogger() {
  return std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
}

TEST(Autotuner, FindsTheBestGridPointOfASyntheticModelInBoundedSteps) {
  Config config;
  config.autotuneWarmupSamples = 1;
  config.autotuneSamples = 3;
  config.autotuneSampleTime = std::chrono::milliseconds(10);
  Tunables initial{64 * 1024, std::chrono::microseconds(1000), true};
  autotune::Autotuner tuner(config, initial, true, quietLogger());
  // Throughput peaks at 4 MiB / 2 ms / cache on, smooth in log space.
  auto rate = [](const Tunables& t) {
    double x = std::log2(static_cast<double>(t.fusionThresholdBytes) / (4 << 20));
    double y = std::log2(t.cycleTime.count() / 2000.0);
    return 1e9 / (1 + 0.1 * x * x + 0.2 * y * y) * (t.cacheEnabled ? 1.0 : 0.7);
  };
  Tunables current = initial;
  auto now = Clock::now();
  double bytes = 0;
  int decisions = 0;
  for (int cycle = 0; cycle < 100000 && !tuner.done(); ++cycle) {
    now += std::chrono::milliseconds(1);
    bytes += rate(current) * 1e-3;
    if (auto d = tuner.onCycle(now, static_cast<uint64_t>(bytes))) {
      ++decisions;
      current = d->tunables;
      tuner.onApplied(*d, now, static_cast<uint64_t>(bytes));
    }
  }
  ASSERT_TRUE(tuner.done());
  EXPECT_EQ(current, (Tunables{4 << 20, std::chrono::microseconds(2000), true}));
  // Bounded: every threshold, every cycle time, the cache flipped, the final choice.
  EXPECT_LE(decisions, static_cast<int>(autotune::Autotuner::thresholdGrid().size() +
                                        autotune::Autotuner::cycleGrid().size() + 2));
  // Done means done: no more decisions however long it runs.
  for (int cycle = 0; cycle < 1000; ++cycle) {
    now += std::chrono::milliseconds(1);
    bytes += 1e6;
    EXPECT_FALSE(tuner.onCycle(now, static_cast<uint64_t>(bytes)).has_value());
  }
}

// On a hierarchical data plane the tuner also scores flat against
// two-level allreduce (last), and keeps the faster; elsewhere it never
// proposes a switch.
TEST(Autotuner, ChoosesBetweenFlatAndTwoLevelAllreduceWhereThePlaneCanSwitch) {
  Config config;
  config.autotuneWarmupSamples = 0;
  config.autotuneSamples = 1;
  config.autotuneSampleTime = std::chrono::milliseconds(10);
  for (bool available : {true, false}) {
    Tunables initial{4 << 20, std::chrono::microseconds(1000), true, true};
    autotune::Autotuner tuner(config, initial, true, quietLogger(), available);
    auto rate = [](const Tunables& t) { return t.hierarchicalAllreduce ? 1e9 : 2e9; };
    Tunables current = initial;
    auto now = Clock::now();
    double bytes = 0;
    bool proposedFlat = false;
    for (int cycle = 0; cycle < 100000 && !tuner.done(); ++cycle) {
      now += std::chrono::milliseconds(1);
      bytes += rate(current) * 1e-3;
      if (auto d = tuner.onCycle(now, static_cast<uint64_t>(bytes))) {
        current = d->tunables;
        proposedFlat = proposedFlat || !current.hierarchicalAllreduce;
        tuner.onApplied(*d, now, static_cast<uint64_t>(bytes));
      }
    }
    ASSERT_TRUE(tuner.done());
    EXPECT_EQ(proposedFlat, available);
    EXPECT_EQ(current.hierarchicalAllreduce, !available) << "available " << available;
  }
}

TEST(Autotuner, DecisionWireFormatIsChecked) {
  autotune::Decision d{{12345, std::chrono::microseconds(2500), false, true}, true};
  auto bytes = wire::encode(d);
  auto back = wire::decodeDecision(bytes);
  EXPECT_EQ(back.tunables, d.tunables);
  EXPECT_TRUE(back.tunables.hierarchicalAllreduce);
  EXPECT_TRUE(back.final);
  bytes.pop_back();
  EXPECT_THROW(wire::decodeDecision(bytes), Internal);
}

TEST(Autotune, ManySmallTensorsEndWithTheBestScoredSettingAppliedIdenticallyOnEveryRank) {
  const std::string csv = (std::filesystem::temp_directory_path() /
                           ("kolo_autotune_" + std::to_string(::getpid()) + ".csv"))
                              .string();
  Config config = testConfig();
  config.autotune = true;
  config.autotuneLogPath = csv;
  config.autotuneWarmupSamples = 1;
  config.autotuneSamples = 3;
  config.autotuneSampleTime = std::chrono::milliseconds(40);
  config.fusionThresholdBytes = 16 * 1024;  // one tensor per backend call: clearly bad
  // ... on Gloo, where a call costs tens of microseconds; over shared memory
  // (the default for ranks of one host) it costs about a microsecond and
  // small thresholds are no longer clearly worse.
  config.shm = false;
  const int size = 2;
  std::vector<TuningState> finalState(size);
  std::vector<int> steps(size);
  spawn(
      size,
      [&](int rank, Engine& engine) {
        std::vector<std::vector<float>> bufs(64, std::vector<float>(4096, 1.0f));
        auto start = Clock::now();
        while (true) {
          std::vector<Handle> handles;
          for (size_t k = 0; k < bufs.size(); ++k) {
            handles.push_back(
                engine.enqueue(makeRequest("grad." + std::to_string(k), OpType::kAllreduce,
                                           DataType::kFloat32, {4096}),
                               Entry{bufs[k].data(), bufs[k].data(), {}, {}}));
          }
          for (auto& h : handles) h.wait();
          ++steps[rank];
          // Stop together: once every rank saw the tuner converge (or on timeout).
          int32_t go = engine.tuning().converged || Clock::now() - start > std::chrono::seconds(60);
          engine
              .enqueue(
                  makeRequest("stop", OpType::kAllreduce, DataType::kInt32, {1}, ReduceOp::kMin),
                  Entry{&go, &go, {}, {}})
              .wait();
          if (go) break;
        }
        engine.barrier().wait();
        finalState[rank] = engine.tuning();
      },
      config, std::chrono::seconds(120));

  const TuningState& t0 = finalState[0];
  EXPECT_TRUE(t0.converged);
  ASSERT_FALSE(t0.history.empty());
  for (int r = 1; r < size; ++r) {
    ASSERT_EQ(finalState[r].history.size(), t0.history.size()) << "rank " << r;
    for (size_t i = 0; i < t0.history.size(); ++i) {
      EXPECT_EQ(finalState[r].history[i].cycle, t0.history[i].cycle) << "change " << i;
      EXPECT_EQ(finalState[r].history[i].tunables, t0.history[i].tunables) << "change " << i;
    }
    EXPECT_EQ(finalState[r].current, t0.current);
  }
  std::ifstream in(csv);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // The setting every rank ended with is the one the tuner's own scores
  // chose: replayed from its log with its rule (a later setting replaces
  // the best only when it scores over 1 % more). Which setting measures
  // best is the machine's business, not the test's: 64 x 16 KiB tensors
  // one per call (the start) scored 2-3 x below every larger threshold on
  // an idle machine, and above most of them under a concurrent build
  // (349 against 200-340 MB/s, 40 ms samples); benchmarks measure speed
  // (bench_fusion_small --autotune).
  struct Scored {
    int64_t threshold;
    int64_t cycleUs;
    bool cache;
  };
  std::optional<Scored> best;
  double bestScore = -1, chosenScore = -1;
  int scored = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f;
    std::stringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    if (f.size() < 9) continue;
    if (f[5] == "score") {
      ++scored;
      const double score = std::stod(f[8]);
      if (bestScore < 0 || score > bestScore * 1.01) {
        bestScore = score;
        best = Scored{std::stoll(f[2]), std::llround(std::stod(f[3]) * 1000), f[4] == "1"};
      }
    }
    if (f[5] == "chosen") chosenScore = std::stod(f[8]);
  }
  // Every threshold of the grid (and the start), then the cycle times.
  EXPECT_GE(scored, static_cast<int>(autotune::Autotuner::thresholdGrid().size())) << text;
  ASSERT_TRUE(best.has_value()) << text;
  EXPECT_EQ(chosenScore, bestScore) << text;
  EXPECT_EQ(t0.current.fusionThresholdBytes, best->threshold) << text;
  EXPECT_EQ(t0.current.cycleTime.count(), best->cycleUs) << text;
  EXPECT_EQ(t0.current.cacheEnabled, best->cache) << text;
  EXPECT_LE(t0.history.size(), autotune::Autotuner::thresholdGrid().size() +
                                   autotune::Autotuner::cycleGrid().size() + 2);

  EXPECT_EQ(text.rfind("row,time_s,fusion_threshold_bytes,cycle_time_ms,cache_enabled,kind,", 0),
            0u);
  EXPECT_NE(text.find(",sample,"), std::string::npos);
  EXPECT_NE(text.find(",warmup,"), std::string::npos);
  EXPECT_NE(text.find(",chosen,"), std::string::npos);
  std::filesystem::remove(csv);
}

// Two hosts of two ranks (a hierarchical data plane): the tuner also tries
// flat allreduce; every rank switches its plane at the same cycle, and the
// sums stay right whichever way they are computed.
TEST(Autotune, HierarchicalPlaneSwitchesBetweenFlatAndTwoLevelOnEveryRankAlike) {
  Config config = testConfig();
  config.autotune = true;
  config.autotuneWarmupSamples = 0;
  config.autotuneSamples = 1;
  config.autotuneSampleTime = std::chrono::milliseconds(10);
  config.hostKeyOverride = [](int rank) { return "host " + std::to_string(rank / 2); };
  const int size = 4;
  std::vector<TuningState> finalState(size);
  spawn(
      size,
      [&](int rank, Engine& engine) {
        std::vector<float> grad(100000);
        auto start = Clock::now();
        while (true) {
          std::fill(grad.begin(), grad.end(), static_cast<float>(rank));
          engine
              .enqueue(makeRequest("grad", OpType::kAllreduce, DataType::kFloat32, {100000}),
                       Entry{grad.data(), grad.data(), {}, {}})
              .wait();
          ASSERT_EQ(grad[99999], 6.0f);
          int32_t go = engine.tuning().converged || Clock::now() - start > std::chrono::seconds(60);
          engine
              .enqueue(
                  makeRequest("stop", OpType::kAllreduce, DataType::kInt32, {1}, ReduceOp::kMin),
                  Entry{&go, &go, {}, {}})
              .wait();
          if (go) break;
        }
        finalState[rank] = engine.tuning();
      },
      config, std::chrono::seconds(120));
  const TuningState& t0 = finalState[0];
  ASSERT_TRUE(t0.converged);
  bool triedFlat = false;
  for (const auto& change : t0.history) triedFlat = triedFlat || !change.tunables.hierarchicalAllreduce;
  EXPECT_TRUE(triedFlat);
  for (int r = 1; r < size; ++r) {
    ASSERT_EQ(finalState[r].history.size(), t0.history.size()) << "rank " << r;
    for (size_t i = 0; i < t0.history.size(); ++i) {
      EXPECT_EQ(finalState[r].history[i].cycle, t0.history[i].cycle) << "change " << i;
      EXPECT_EQ(finalState[r].history[i].tunables, t0.history[i].tunables) << "change " << i;
    }
  }
}

}  // namespace
}  // namespace kolo::test
