#include "config_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>

#include "usage_error.h"

namespace kolo::launcher {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Reads one section of the file; every error names the file, key and line.
class Section {
 public:
  Section(const std::string& source, const std::string& name, const YAML::Node& node,
          Options& options, const FlagGiven& given)
      : source_(source), name_(name), node_(node), o_(options), given_(given) {}

  // The setting `key` of this section, unless one of `flags` was given on
  // the command line.
  std::optional<YAML::Node> get(const std::string& key, std::initializer_list<const char*> flags) {
    used_.push_back(key);
    for (const char* f : flags) {
      if (given_(f)) return std::nullopt;
    }
    YAML::Node v = node_[key];
    if (!v || v.IsNull()) return std::nullopt;
    if (!v.IsScalar()) fail(v, key, "expected a single value, got a list or map");
    return v;
  }

  double number(const YAML::Node& v, const std::string& key, double min, double max,
                const std::string& accepted) {
    double d = 0;
    if (!YAML::convert<double>::decode(v, d) || !std::isfinite(d) || d < min || d > max) {
      fail(v, key, "expected " + accepted + ", got '" + v.Scalar() + "'");
    }
    return d;
  }

  int integer(const YAML::Node& v, const std::string& key, const std::string& accepted) {
    long long i = 0;
    if (!YAML::convert<long long>::decode(v, i) || i < 0 || i > std::numeric_limits<int>::max()) {
      fail(v, key, "expected " + accepted + ", got '" + v.Scalar() + "'");
    }
    return static_cast<int>(i);
  }

  // YAML's true/false (yes/no, on/off) or Horovod's 0/1.
  bool boolean(const YAML::Node& v, const std::string& key) {
    bool b = false;
    if (YAML::convert<bool>::decode(v, b)) return b;
    long long i = 0;
    if (YAML::convert<long long>::decode(v, i) && (i == 0 || i == 1)) return i == 1;
    fail(v, key, "expected true or false, got '" + v.Scalar() + "'");
  }

  // Keys of this section that are not part of the schema.
  void reportUnknown() {
    for (const auto& kv : node_) {
      const std::string key = kv.first.as<std::string>();
      if (std::find(used_.begin(), used_.end(), key) == used_.end()) {
        o_.notices.push_back("--config-file " + source_ + ": '" + name_ + "." + key +
                             "' is not one of Horovod's settings; ignored (as horovodrun does)");
      }
    }
  }

  [[noreturn]] void fail(const YAML::Node& v, const std::string& key, const std::string& what) {
    throw UsageError("--config-file " + source_ + ", line " + std::to_string(v.Mark().line + 1) +
                     ": " + name_ + "." + key + ": " + what);
  }

 private:
  std::string source_;
  std::string name_;
  YAML::Node node_;
  Options& o_;
  const FlagGiven& given_;
  std::vector<std::string> used_;
};

std::string logLevel(Section& s, const YAML::Node& v, Options& o) {
  const std::string level = lower(v.Scalar());
  for (const char* l : {"trace", "debug", "info", "warning", "error", "off"}) {
    if (level == l) return level;
  }
  if (level == "fatal") {
    o.notices.push_back(
        "logging.level FATAL: kolo has no fatal level; it logs errors only "
        "(KOLO_LOG_LEVEL=error)");
    return "error";
  }
  s.fail(v, "level",
         "expected one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL, got '" + v.Scalar() + "'");
}

void applyParams(Section& s, Options& o) {
  if (auto v = s.get("fusion_threshold_mb", {"--fusion-threshold-mb"})) {
    o.fusionThresholdMb = s.number(*v, "fusion_threshold_mb", 0, 1 << 20, "megabytes >= 0");
  }
  if (auto v = s.get("cycle_time_ms", {"--cycle-time-ms"})) {
    o.cycleTimeMs = s.number(*v, "cycle_time_ms", 0, 10000, "milliseconds between 0 and 10000");
  }
  if (auto v = s.get("cache_capacity", {"--cache-capacity"})) {
    o.cacheCapacity = s.integer(*v, "cache_capacity", "an integer >= 0");
  }
  if (auto v = s.get("hierarchical_allreduce",
                     {"--hierarchical-allreduce", "--no-hierarchical-allreduce"})) {
    o.hierarchicalAllreduce = s.boolean(*v, "hierarchical_allreduce");
  }
  if (auto v = s.get("hierarchical_allgather",
                     {"--hierarchical-allgather", "--no-hierarchical-allgather"})) {
    o.hierarchicalAllgather = s.boolean(*v, "hierarchical_allgather");
  }
  if (auto v = s.get("torus_allreduce", {"--torus-allreduce", "--no-torus-allreduce"})) {
    o.torusAllreduce = s.boolean(*v, "torus_allreduce");
  }
}

void applyAutotune(Section& s, Options& o) {
  // As in horovodrun: a present section without `enabled` means off.
  if (auto v = s.get("enabled", {"--autotune", "--no-autotune"})) {
    o.autotune = s.boolean(*v, "enabled");
  } else if (!o.autotune) {
    o.autotune = false;
  }
  if (auto v = s.get("log_file", {"--autotune-log-file"})) o.autotuneLogFile = v->Scalar();
  if (auto v = s.get("warmup_samples", {"--autotune-warmup-samples"})) {
    o.autotuneWarmupSamples = s.integer(*v, "warmup_samples", "an integer >= 0");
  }
  if (auto v = s.get("steps_per_sample", {"--autotune-steps-per-sample"})) {
    o.autotuneStepsPerSample = s.integer(*v, "steps_per_sample", "an integer >= 0");
  }
  if (auto v = s.get("bayes_opt_max_samples", {"--autotune-bayes-opt-max-samples"})) {
    o.autotuneBayesOptMaxSamples = s.integer(*v, "bayes_opt_max_samples", "an integer >= 0");
  }
  if (auto v = s.get("gaussian_process_noise", {"--autotune-gaussian-process-noise"})) {
    o.autotuneGaussianProcessNoise =
        s.number(*v, "gaussian_process_noise", 0, 1, "a number in [0, 1]");
  }
}

void applyTimeline(Section& s, Options& o) {
  if (auto v = s.get("filename", {"--timeline-filename"})) o.timelineFilename = v->Scalar();
  if (auto v = s.get("mark_cycles", {"--timeline-mark-cycles", "--no-timeline-mark-cycles"})) {
    o.timelineMarkCycles = s.boolean(*v, "mark_cycles");
  }
}

void applyStallCheck(Section& s, Options& o) {
  // As in horovodrun: a present section without `enabled` means on.
  if (auto v = s.get("enabled", {"--no-stall-check", "--stall-check"})) {
    o.noStallCheck = !s.boolean(*v, "enabled");
  } else if (!o.noStallCheck) {
    o.noStallCheck = false;
  }
  if (auto v = s.get("warning_time_seconds", {"--stall-check-warning-time-seconds"})) {
    o.stallCheckWarningSeconds = s.number(*v, "warning_time_seconds", 0, 86400, "seconds >= 0");
  }
  if (auto v = s.get("shutdown_time_seconds", {"--stall-check-shutdown-time-seconds"})) {
    o.stallCheckShutdownSeconds = s.number(*v, "shutdown_time_seconds", 0, 86400, "seconds >= 0");
  }
}

void applyLibraryOptions(Section& s, Options& o) {
  if (auto v =
          s.get("mpi_threads_disable", {"--mpi-threads-disable", "--no-mpi-threads-disable"})) {
    o.mpiThreadsDisable = s.boolean(*v, "mpi_threads_disable");
  }
  if (auto v = s.get("num_nccl_streams", {"--num-nccl-streams"})) {
    o.numNcclStreams = s.integer(*v, "num_nccl_streams", "an integer >= 0");
  }
  if (auto v = s.get("thread_affinity", {"--thread-affinity"})) {
    o.threadAffinity = s.integer(*v, "thread_affinity", "an integer >= 0");
  }
  if (auto v = s.get("gloo_timeout_seconds", {"--gloo-timeout-seconds"})) {
    o.glooTimeoutSeconds = s.number(*v, "gloo_timeout_seconds", 0.001, 86400, "seconds > 0");
  }
}

void applyLogging(Section& s, Options& o) {
  if (auto v = s.get("level", {"--log-level"})) o.logLevel = logLevel(s, *v, o);
  const std::initializer_list<const char*> timestampFlags = {
      "--log-with-timestamp", "--log-without-timestamp", "--log-hide-timestamp",
      "--no-log-hide-timestamp"};
  if (auto v = s.get("with_timestamp", timestampFlags)) {
    o.logWithTimestamp = s.boolean(*v, "with_timestamp");
  } else if (auto h = s.get("hide_timestamp", timestampFlags)) {
    o.logWithTimestamp = !s.boolean(*h, "hide_timestamp");
  }
}

}  // namespace

void applyConfigText(const std::string& text, const std::string& source, Options& o,
                     const FlagGiven& given) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw UsageError("--config-file " + source + ", line " + std::to_string(e.mark.line + 1) +
                     ": not valid YAML: " + e.msg);
  }
  if (!root || root.IsNull()) return;  // an empty file sets nothing
  if (!root.IsMap()) {
    throw UsageError("--config-file " + source +
                     ": expected a map of Horovod's settings (controller, params, autotune, "
                     "timeline, stall_check, library_options, logging)");
  }
  struct Part {
    const char* name;
    void (*apply)(Section&, Options&);
  };
  const Part parts[] = {{"params", applyParams},
                        {"autotune", applyAutotune},
                        {"timeline", applyTimeline},
                        {"stall_check", applyStallCheck},
                        {"library_options", applyLibraryOptions},
                        {"logging", applyLogging}};
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& value = kv.second;
    const std::string line = ", line " + std::to_string(value.Mark().line + 1);
    if (key == "controller") {
      if (given("--gloo") || given("--mpi") || given("--jsrun") || value.IsNull()) continue;
      const std::string c = value.IsScalar() ? lower(value.Scalar()) : "";
      if (c == "gloo") {
        o.gloo = true;
      } else if (c == "mpi") {
        o.mpi = true;
      } else {
        throw UsageError("--config-file " + source + line +
                         ": controller: expected gloo or mpi, got '" +
                         (value.IsScalar() ? value.Scalar() : "a list or map") + "'");
      }
      continue;
    }
    const Part* part = nullptr;
    for (const auto& p : parts) {
      if (key == p.name) part = &p;
    }
    if (part == nullptr) {
      o.notices.push_back("--config-file " + source + ": '" + key +
                          "' is not one of Horovod's settings; ignored (as horovodrun does)");
      continue;
    }
    if (value.IsNull()) continue;  // an empty section, as horovodrun: nothing
    if (!value.IsMap()) {
      throw UsageError("--config-file " + source + line + ": " + key +
                       ": expected a map of settings");
    }
    Section section(source, key, value, o, given);
    part->apply(section, o);
    section.reportUnknown();
  }
}

void applyConfigFile(const std::string& path, Options& options, const FlagGiven& given) {
  std::ifstream in(path);
  if (!in) {
    throw UsageError("--config-file " + path + ": cannot read it (" + std::strerror(errno) + ")");
  }
  std::ostringstream text;
  text << in.rdbuf();
  applyConfigText(text.str(), path, options, given);
}

}  // namespace kolo::launcher
