#include "autotune/autotuner.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <utility>

#include "kolo/error.h"

namespace kolo::autotune {
namespace {

// A candidate must beat the incumbent by this factor to replace it, so
// measurement noise does not move the choice between equivalent settings.
constexpr double kMinGain = 1.01;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::vector<int64_t> Autotuner::thresholdGrid() {
  std::vector<int64_t> grid;
  for (int64_t kib = 16; kib <= 256 * 1024; kib *= 4) grid.push_back(kib * 1024);
  return grid;  // 16 KiB, 64 KiB, ..., 256 MiB
}

std::vector<std::chrono::microseconds> Autotuner::cycleGrid() {
  return {std::chrono::microseconds(500), std::chrono::microseconds(1000),
          std::chrono::microseconds(2000), std::chrono::microseconds(5000),
          std::chrono::microseconds(10000)};
}

Autotuner::Key Autotuner::keyOf(const Tunables& t) {
  return {t.fusionThresholdBytes, t.cycleTime.count(), t.cacheEnabled, t.hierarchicalAllreduce};
}

Autotuner::Autotuner(const Config& config, const Tunables& initial, bool cacheAvailable,
                     std::shared_ptr<spdlog::logger> log, bool hierarchyAvailable)
    : config_(config),
      log_(std::move(log)),
      cacheAvailable_(cacheAvailable),
      hierarchyAvailable_(hierarchyAvailable),
      start_(Clock::now()),
      current_(initial),
      best_(initial),
      warmupLeft_(config.autotuneWarmupSamples) {
  if (!config.autotuneLogPath.empty()) {
    csv_ = std::fopen(config.autotuneLogPath.c_str(), "w");
    if (csv_ == nullptr) {
      throw InvalidArgument("cannot create KOLO_AUTOTUNE_LOG file '" + config.autotuneLogPath +
                            "': " + std::strerror(errno));
    }
    std::fputs(
        "row,time_s,fusion_threshold_bytes,cycle_time_ms,cache_enabled,kind,bytes,"
        "seconds,bytes_per_second\n",
        csv_);
    std::fflush(csv_);
  }
  std::vector<int64_t> thresholds = thresholdGrid();
  thresholds.push_back(initial.fusionThresholdBytes);
  std::sort(thresholds.begin(), thresholds.end());
  thresholds.erase(std::unique(thresholds.begin(), thresholds.end()), thresholds.end());
  for (int64_t t : thresholds) {
    Tunables c = initial;
    c.fusionThresholdBytes = t;
    candidates_.push_back(c);
  }
  log_->info("autotune: starting from fusion threshold {} B, cycle time {} us, cache {}",
             initial.fusionThresholdBytes, initial.cycleTime.count(),
             initial.cacheEnabled ? "on" : "off");
}

Autotuner::~Autotuner() {
  if (csv_ != nullptr) std::fclose(csv_);
}

std::optional<Decision> Autotuner::next() {
  while (true) {
    while (!candidates_.empty()) {
      Tunables c = candidates_.front();
      candidates_.erase(candidates_.begin());
      if (scores_.count(keyOf(c)) == 0) return Decision{c, false};
    }
    switch (phase_) {
      case Phase::kThreshold: {
        phase_ = Phase::kCycle;
        auto cycles = cycleGrid();
        cycles.push_back(best_.cycleTime);
        std::sort(cycles.begin(), cycles.end());
        for (auto cycle : cycles) {
          Tunables c = best_;
          c.cycleTime = cycle;
          candidates_.push_back(c);
        }
        break;
      }
      case Phase::kCycle:
        phase_ = Phase::kCache;
        if (cacheAvailable_) {
          Tunables c = best_;
          c.cacheEnabled = !c.cacheEnabled;
          candidates_.push_back(c);
        }
        break;
      case Phase::kCache:
        phase_ = Phase::kHierarchy;
        if (hierarchyAvailable_) {
          Tunables c = best_;
          c.hierarchicalAllreduce = !c.hierarchicalAllreduce;
          candidates_.push_back(c);
        }
        break;
      case Phase::kHierarchy:
        phase_ = Phase::kFinal;
        return Decision{best_, true};
      case Phase::kFinal:
        return std::nullopt;
    }
  }
}

std::optional<Decision> Autotuner::onCycle(Clock::time_point now, uint64_t bytesTotal) {
  if (done_ || awaiting_) return std::nullopt;
  if (!windowOpen_ || bytesTotal == windowBytes_) {
    // A window starts with traffic: idle time before the first byte (the
    // job not submitting anything) says nothing about the setting.
    windowOpen_ = true;
    windowStart_ = now;
    windowBytes_ = bytesTotal;
    return std::nullopt;
  }
  const double seconds = std::chrono::duration<double>(now - windowStart_).count();
  if (now - windowStart_ < config_.autotuneSampleTime) return std::nullopt;
  const uint64_t bytes = bytesTotal - windowBytes_;
  const double rate = static_cast<double>(bytes) / seconds;
  windowStart_ = now;
  windowBytes_ = bytesTotal;
  if (warmupLeft_ > 0) {
    --warmupLeft_;
    logRow("warmup", bytes, seconds, rate);
    return std::nullopt;
  }
  samples_.push_back(rate);
  logRow("sample", bytes, seconds, rate);
  if (static_cast<int>(samples_.size()) < config_.autotuneSamples) return std::nullopt;

  const double score = median(samples_);
  scores_[keyOf(current_)] = score;
  logRow("score", 0, 0, score);
  log_->info("autotune: fusion threshold {} B, cycle time {} us, cache {}, allreduce {}: {:.1f} MB/s",
             current_.fusionThresholdBytes, current_.cycleTime.count(),
             current_.cacheEnabled ? "on" : "off",
             current_.hierarchicalAllreduce ? "two-level" : "flat", score / 1e6);
  if (bestScore_ < 0 || score > bestScore_ * kMinGain) {
    best_ = current_;
    bestScore_ = score;
  }
  auto decision = next();
  if (decision) awaiting_ = true;
  return decision;
}

void Autotuner::onApplied(const Decision& d, Clock::time_point now, uint64_t bytesTotal) {
  current_ = d.tunables;
  awaiting_ = false;
  samples_.clear();
  warmupLeft_ = config_.autotuneWarmupSamples;
  windowOpen_ = true;
  windowStart_ = now;
  windowBytes_ = bytesTotal;
  if (d.final) {
    done_ = true;
    logRow("chosen", 0, 0, bestScore_);
    log_->info(
        "autotune: done after {} settings: fusion threshold {} B, cycle time {} us, "
        "cache {}, allreduce {} ({:.1f} MB/s)",
        scores_.size(), best_.fusionThresholdBytes, best_.cycleTime.count(),
        best_.cacheEnabled ? "on" : "off", best_.hierarchicalAllreduce ? "two-level" : "flat",
        bestScore_ / 1e6);
  }
}

void Autotuner::logRow(const char* kind, uint64_t bytes, double seconds, double rate) {
  if (csv_ == nullptr) return;
  const double t = std::chrono::duration<double>(Clock::now() - start_).count();
  std::fprintf(
      csv_, "%llu,%.4f,%lld,%.3f,%d,%s,%llu,%.6f,%.1f\n", static_cast<unsigned long long>(rows_++),
      t, static_cast<long long>(current_.fusionThresholdBytes),
      static_cast<double>(current_.cycleTime.count()) / 1000.0, current_.cacheEnabled ? 1 : 0, kind,
      static_cast<unsigned long long>(bytes), seconds, rate);
  std::fflush(csv_);
}

}  // namespace kolo::autotune
