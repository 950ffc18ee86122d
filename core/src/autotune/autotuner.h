// Online tuning of fusion threshold, cycle time and response cache on/off
// from measured throughput (bytes reduced per second).
//
// Method: coordinate descent over small fixed grids. Starting from the
// configured values it scores every threshold (cycle time and cache held),
// keeps the best, then every cycle time, then the cache flipped, then (on a
// hierarchical data plane) flat vs two-level allreduce. A score is
// the median of KOLO_AUTOTUNE_SAMPLES samples of KOLO_AUTOTUNE_SAMPLE_TIME
// each, taken after KOLO_AUTOTUNE_WARMUP_SAMPLES discarded ones. At most
// |thresholds| + |cycle times| + 3 settings are scored; then the best is
// applied for good and exploring stops.
//
// Only rank 0 runs an Autotuner. Its decisions reach every rank through the
// controller (a status bit, then a broadcast at the same cycle), so all
// ranks switch at the same cycle. Loop thread of rank 0 only.
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <spdlog/spdlog.h>

#include "kolo/config.h"
#include "kolo/engine.h"
#include "wire/tuning.h"

namespace kolo::autotune {

// What rank 0 broadcasts when the tunables change (encoded in wire/tuning.h).
using Decision = wire::TuningDecision;

class Autotuner {
 public:
  using Clock = std::chrono::steady_clock;

  // initial: the tunables in force now. cacheAvailable: false when the
  // cache has capacity 0 (then on/off is not tuned). hierarchyAvailable:
  // the data plane can switch allreduce between flat and two-level (then
  // both are scored, last).
  Autotuner(const Config& config, const Tunables& initial, bool cacheAvailable,
            std::shared_ptr<spdlog::logger> log, bool hierarchyAvailable = false);
  ~Autotuner();

  Autotuner(const Autotuner&) = delete;
  Autotuner& operator=(const Autotuner&) = delete;

  // After each cycle, with the running total of bytes reduced. Returns a
  // change to announce; none is returned until that one was applied.
  std::optional<Decision> onCycle(Clock::time_point now, uint64_t bytesTotal);

  // The announced change took effect on every rank (this cycle).
  void onApplied(const Decision& d, Clock::time_point now, uint64_t bytesTotal);

  bool done() const { return done_; }
  const Tunables& best() const { return best_; }

  static std::vector<int64_t> thresholdGrid();
  static std::vector<std::chrono::microseconds> cycleGrid();

 private:
  using Key = std::tuple<int64_t, int64_t, bool, bool>;
  static Key keyOf(const Tunables& t);

  std::optional<Decision> next();  // the next untested candidate or the final choice
  void logRow(const char* kind, uint64_t bytes, double seconds, double rate);

  const Config& config_;
  std::shared_ptr<spdlog::logger> log_;
  const bool cacheAvailable_;
  const bool hierarchyAvailable_;
  FILE* csv_ = nullptr;
  Clock::time_point start_;

  enum class Phase { kThreshold, kCycle, kCache, kHierarchy, kFinal };
  Phase phase_ = Phase::kThreshold;
  std::vector<Tunables> candidates_;  // left in this phase

  Tunables current_;
  Tunables best_;
  double bestScore_ = -1;
  std::map<Key, double> scores_;

  bool awaiting_ = false;  // a decision is on its way to the ranks
  bool done_ = false;
  bool windowOpen_ = false;
  Clock::time_point windowStart_;
  uint64_t windowBytes_ = 0;
  int warmupLeft_ = 0;
  std::vector<double> samples_;
  uint64_t rows_ = 0;
};

}  // namespace kolo::autotune
