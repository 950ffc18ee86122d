#include "kolo/config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "kolo/build_config.h"
#include "kolo/error.h"

namespace kolo {

EnvLookup processEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {

[[noreturn]] void badValue(const std::string& name, const std::string& value,
                           const std::string& accepted) {
  throw InvalidArgument("invalid value for " + name + ": '" + value + "' (expected " +
                        accepted + ")");
}

int64_t parseInt(const std::string& name, const std::string& value, int64_t min,
                 int64_t max, const std::string& accepted) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || errno != 0 || *end != '\0' || v < min || v > max) {
    badValue(name, value, accepted);
  }
  return v;
}

double parseNumber(const std::string& name, const std::string& value, double min,
                   double max, const std::string& accepted) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || errno != 0 || *end != '\0' || !std::isfinite(v) || v < min ||
      v > max) {
    badValue(name, value, accepted);
  }
  return v;
}

bool parseBool(const std::string& name, const std::string& value) {
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  if (value == "0" || value == "false" || value == "no" || value == "off" || value.empty()) {
    return false;
  }
  badValue(name, value, "1/0, true/false, yes/no or on/off");
}

std::string parseChoice(const std::string& name, const std::string& value,
                        const std::vector<std::string>& choices) {
  std::string accepted;
  for (const auto& c : choices) {
    if (value == c) return value;
    accepted += (accepted.empty() ? "" : "|") + c;
  }
  badValue(name, value, "one of " + accepted);
}

// A switch that may be left to kolo: unset or "auto" is nullopt. The
// Horovod name is read when kolo's is unset.
std::optional<bool> parseAuto(const EnvLookup& env, const std::string& name,
                              const std::string& alias) {
  std::string used = name;
  auto v = env(name);
  if (!v && !alias.empty()) {
    v = env(alias);
    used = alias;
  }
  if (!v || *v == "auto") return std::nullopt;
  if (v->empty()) return false;
  if (*v == "1" || *v == "true" || *v == "yes" || *v == "on") return true;
  if (*v == "0" || *v == "false" || *v == "no" || *v == "off") return false;
  badValue(used, *v, "1/0, true/false, yes/no, on/off or auto");
}

std::chrono::milliseconds seconds(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(s * 1000.0)));
}

// Started by mpirun (OpenMPI's or a PMI one) and not by kolorun's own
// workers or torchrun: the same precedence as launchInfoFromEnv.
bool startedByMpirun(const EnvLookup& env) {
  if (env("KOLO_RANK") || (env("RANK") && env("WORLD_SIZE"))) return false;
  return env("OMPI_COMM_WORLD_RANK") || env("PMI_RANK");
}

}  // namespace

Config Config::fromEnv(const EnvLookup& env) {
  Config c;
  const double kDay = 86400.0;
  if (auto v = env("KOLO_FUSION_THRESHOLD")) {
    c.fusionThresholdBytes = parseInt("KOLO_FUSION_THRESHOLD", *v, 0, int64_t{1} << 40,
                                      "bytes, an integer >= 0; 0 disables fusion");
  }
  if (auto v = env("KOLO_CYCLE_TIME")) {
    double ms = parseNumber("KOLO_CYCLE_TIME", *v, 0.0, 10000.0,
                            "milliseconds between 0 and 10000, e.g. 1 or 0.5");
    c.cycleTime = std::chrono::microseconds(static_cast<int64_t>(std::llround(ms * 1000.0)));
  }
  if (auto v = env("KOLO_SPIN_TIME")) {
    c.spinTime = std::chrono::microseconds(parseInt("KOLO_SPIN_TIME", *v, 0, 1000000,
                                                    "microseconds, an integer >= 0; 0 disables"));
  }
  if (auto v = env("KOLO_CACHE_CAPACITY")) {
    c.cacheCapacity = static_cast<int>(parseInt("KOLO_CACHE_CAPACITY", *v, 0, 1 << 20,
                                                "an integer >= 0; 0 disables the cache"));
  }
  if (auto v = env("KOLO_TIMEOUT")) {
    c.timeout = seconds(parseNumber("KOLO_TIMEOUT", *v, 0.001, kDay,
                                    "seconds > 0, e.g. 60 or 2.5"));
  }
  if (auto v = env("KOLO_STALL_CHECK_TIME")) {
    c.stallCheckTime = seconds(parseNumber("KOLO_STALL_CHECK_TIME", *v, 0.0, kDay,
                                           "seconds >= 0; 0 disables the stall check"));
  }
  if (auto v = env("KOLO_STALL_SHUTDOWN_TIME")) {
    c.stallShutdownTime = seconds(parseNumber("KOLO_STALL_SHUTDOWN_TIME", *v, 0.0, kDay,
                                              "seconds >= 0; 0 never shuts down on a stall"));
  }
  if (auto v = env("KOLO_TIMELINE")) c.timelinePath = *v;
  if (auto v = env("KOLO_AUTOTUNE")) c.autotune = parseBool("KOLO_AUTOTUNE", *v);
  if (auto v = env("KOLO_AUTOTUNE_LOG")) c.autotuneLogPath = *v;
  if (auto v = env("KOLO_AUTOTUNE_WARMUP_SAMPLES")) {
    c.autotuneWarmupSamples = static_cast<int>(
        parseInt("KOLO_AUTOTUNE_WARMUP_SAMPLES", *v, 0, 1000, "an integer between 0 and 1000"));
  }
  if (auto v = env("KOLO_AUTOTUNE_SAMPLES")) {
    c.autotuneSamples = static_cast<int>(
        parseInt("KOLO_AUTOTUNE_SAMPLES", *v, 1, 1000, "an integer between 1 and 1000"));
  }
  if (auto v = env("KOLO_AUTOTUNE_SAMPLE_TIME")) {
    c.autotuneSampleTime = seconds(parseNumber("KOLO_AUTOTUNE_SAMPLE_TIME", *v, 0.001, 3600.0,
                                               "seconds between 0.001 and 3600, e.g. 0.5"));
  }
  if (auto v = env("KOLO_TIMELINE_MARK_CYCLES")) {
    c.timelineMarkCycles = parseBool("KOLO_TIMELINE_MARK_CYCLES", *v);
  }
  if (auto v = env("KOLO_LOG_LEVEL")) {
    static const char* kLevels[] = {"trace", "debug", "info", "warning", "error", "off"};
    std::string level = *v == "warn" ? "warning" : *v;
    parseChoice("KOLO_LOG_LEVEL", level, {"trace", "debug", "info", "warning", "error", "off"});
    for (int i = 0; i < 6; ++i) {
      if (level == kLevels[i]) c.logLevel = static_cast<LogLevel>(i);
    }
  }
  if (auto v = env("KOLO_CONTROLLER")) c.controller = parseChoice("KOLO_CONTROLLER", *v, {"gloo", "mpi"});
  if (auto v = env("KOLO_CPU_OPERATIONS")) {
    c.cpuOperations = parseChoice("KOLO_CPU_OPERATIONS", *v, {"gloo", "mpi"});
  }
  if (auto v = env("KOLO_GPU_OPERATIONS")) {
    c.gpuOperations = parseChoice("KOLO_GPU_OPERATIONS", *v, {"nccl", "mpi", "gloo"});
  }
  if (auto v = env("KOLO_IFACE")) c.iface = *v;
  c.shm = parseAuto(env, "KOLO_SHM", "");
  c.hierarchicalAllreduce = parseAuto(env, "KOLO_HIERARCHICAL_ALLREDUCE",
                                      "HOROVOD_HIERARCHICAL_ALLREDUCE");
  c.hierarchicalAllgather = parseAuto(env, "KOLO_HIERARCHICAL_ALLGATHER",
                                      "HOROVOD_HIERARCHICAL_ALLGATHER");
  // Under mpirun with neither variable set, MPI carries both control and
  // data (in builds with MPI); setting either one turns this off.
  if (KOLO_WITH_MPI && !env("KOLO_CONTROLLER") && !env("KOLO_CPU_OPERATIONS") &&
      startedByMpirun(env)) {
    c.controller = "mpi";
    c.cpuOperations = "mpi";
  }
  return c;
}

const char* toString(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "trace";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "unknown";
}

}  // namespace kolo
