#include "kolo/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>
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

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// One setting as read: under kolo's name or under Horovod's alias.
struct Read {
  std::string name;
  std::string value;
  bool horovod = false;
};

// Reads each setting under kolo's name, else under Horovod's (the KOLO_*
// variable wins; an alias it overrides is reported).
class Reader {
 public:
  Reader(const EnvLookup& env, ConfigNotices& notices) : env_(env), notices_(notices) {}

  std::optional<Read> get(const std::string& kolo, const std::string& horovod = "") {
    auto k = env_(kolo);
    auto h = horovod.empty() ? std::nullopt : env_(horovod);
    if (k && h) {
      notices_.lines.push_back(horovod + "=" + *h + " is overridden by " + kolo + "=" + *k);
    }
    if (k) return Read{kolo, *k, false};
    if (h) return Read{horovod, *h, true};
    return std::nullopt;
  }

  bool has(const std::string& name) const { return env_(name).has_value(); }
  std::optional<std::string> raw(const std::string& name) const { return env_(name); }
  void note(const std::string& line) { notices_.lines.push_back(line); }

 private:
  const EnvLookup& env_;
  ConfigNotices& notices_;
};

// Horovod's switches are integers (> 0 is on); kolo's words are accepted too.
bool parseHorovodBool(const std::string& name, const std::string& value,
                      const std::string& orElse = "") {
  const std::string accepted = "an integer >= 0 (0 off, > 0 on), true/false" + orElse;
  if (!value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0;
      })) {
    return parseInt(name, value, 0, std::numeric_limits<int32_t>::max(), accepted) > 0;
  }
  if (value == "true" || value == "yes" || value == "on") return true;
  if (value == "false" || value == "no" || value == "off" || value.empty()) return false;
  badValue(name, value, accepted);
}

bool parseSwitch(const Read& r) {
  return r.horovod ? parseHorovodBool(r.name, r.value) : parseBool(r.name, r.value);
}

// A switch that may be left to kolo: unset or "auto" is nullopt.
std::optional<bool> parseAuto(Reader& reader, const std::string& name, const std::string& alias) {
  auto r = reader.get(name, alias);
  if (!r || r->value == "auto") return std::nullopt;
  if (r->horovod) return parseHorovodBool(r->name, r->value, " or auto");
  if (r->value.empty()) return false;
  if (r->value == "1" || r->value == "true" || r->value == "yes" || r->value == "on") return true;
  if (r->value == "0" || r->value == "false" || r->value == "no" || r->value == "off") return false;
  badValue(r->name, r->value, "1/0, true/false, yes/no, on/off or auto");
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

// HOROVOD_* variables that kolo reads but that change nothing in kolo. A
// value is still checked (a typo is an error, as for every variable), then
// reported with what kolo does instead.
enum class Form { kSwitch, kCount, kFraction, kText, kCoreList };
struct Unused {
  const char* name;
  Form form;
  const char* instead;
};

constexpr const char* kRanksInstead =
    "set by horovodrun for its own rendezvous; kolo's workers take their place in the job "
    "from kolorun's KOLO_RANK, KOLO_SIZE, ... (or torchrun's, mpirun's or Slurm's variables)";
constexpr const char* kGpuBuildInstead =
    "a build setting of Horovod; kolo chooses GPU operations at run time with "
    "KOLO_GPU_OPERATIONS (alias HOROVOD_GPU_OPERATIONS)";

const Unused kUnused[] = {
    {"HOROVOD_TORUS_ALLREDUCE", Form::kSwitch,
     "kolo has no NCCL torus allreduce; its two-level allreduce is KOLO_HIERARCHICAL_ALLREDUCE "
     "(alias HOROVOD_HIERARCHICAL_ALLREDUCE)"},
    {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", Form::kCount,
     "kolo's autotuner measures each sample over a time, KOLO_AUTOTUNE_SAMPLE_TIME (seconds), "
     "not over a number of steps"},
    {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", Form::kCount,
     "kolo's autotuner searches small fixed grids one parameter at a time, not by Bayesian "
     "optimisation; KOLO_AUTOTUNE_SAMPLES sets the samples scored per setting"},
    {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", Form::kFraction,
     "kolo's autotuner has no Gaussian process; it scores each setting by the median of "
     "KOLO_AUTOTUNE_SAMPLES samples"},
    {"HOROVOD_MPI_THREADS_DISABLE", Form::kSwitch,
     "kolo initialises MPI (when it does) with MPI_THREAD_SERIALIZED, which its background "
     "thread needs"},
    {"HOROVOD_BATCH_D2D_MEMCOPIES", Form::kSwitch,
     "kolo always packs a fused GPU buffer with one batched copy kernel"},
    {"HOROVOD_NUM_NCCL_STREAMS", Form::kCount,
     "kolo runs GPU collectives on one communication stream per device, shared by every "
     "process set, so that they keep one global order"},
    {"HOROVOD_CCL_CACHE", Form::kSwitch, "kolo has no oneCCL backend"},
    {"HOROVOD_ADASUM_MPI_CHUNK_SIZE", Form::kCount,
     "kolo's Adasum moves data with one alltoallv and one allgatherv on the chosen backend and "
     "has no chunk size"},
    {"HOROVOD_THREAD_AFFINITY", Form::kCoreList,
     "kolo does not pin its background thread; pin the process instead (taskset, numactl, "
     "mpirun --bind-to)"},
    {"HOROVOD_DISABLE_GROUP_FUSION", Form::kSwitch,
     "kolo has no such switch: a group is negotiated as one unit and its tensors fuse by "
     "KOLO_FUSION_THRESHOLD"},
    {"HOROVOD_DISABLE_NVTX_RANGES", Form::kSwitch,
     "kolo emits no NVTX ranges, so there is nothing to disable"},
    {"HOROVOD_ENABLE_ASYNC_COMPLETION", Form::kSwitch,
     "kolo always completes GPU operations asynchronously (one completion watcher per device)"},
    {"HOROVOD_DYNAMIC_PROCESS_SETS", Form::kSwitch,
     "kolo always allows add_process_set and remove_process_set"},
    {"HOROVOD_ENABLE_XLA_OPS", Form::kSwitch,
     "XLA operations are TensorFlow's; kolo serves PyTorch and LibTorch"},
    {"HOROVOD_ELASTIC", Form::kSwitch,
     "set by horovodrun for elastic workers; kolorun's elastic driver sets KOLO_ELASTIC_WORKER"},
    {"HOROVOD_GPU_ALLREDUCE", Form::kText, kGpuBuildInstead},
    {"HOROVOD_GPU_ALLGATHER", Form::kText, kGpuBuildInstead},
    {"HOROVOD_GPU_BROADCAST", Form::kText, kGpuBuildInstead},
    {"HOROVOD_GPU_ALLTOALL", Form::kText, kGpuBuildInstead},
    {"HOROVOD_GPU_REDUCESCATTER", Form::kText, kGpuBuildInstead},
    {"HOROVOD_RANK", Form::kText, kRanksInstead},
    {"HOROVOD_SIZE", Form::kText, kRanksInstead},
    {"HOROVOD_LOCAL_RANK", Form::kText, kRanksInstead},
    {"HOROVOD_LOCAL_SIZE", Form::kText, kRanksInstead},
    {"HOROVOD_CROSS_RANK", Form::kText, kRanksInstead},
    {"HOROVOD_CROSS_SIZE", Form::kText, kRanksInstead},
    {"HOROVOD_HOSTNAME", Form::kText, kRanksInstead},
    {"HOROVOD_GLOO_RENDEZVOUS_ADDR", Form::kText, kRanksInstead},
    {"HOROVOD_GLOO_RENDEZVOUS_PORT", Form::kText, kRanksInstead},
};

void checkUnused(const Unused& u, const std::string& value) {
  switch (u.form) {
    case Form::kSwitch:
      parseHorovodBool(u.name, value);
      break;
    case Form::kCount:
      parseInt(u.name, value, 0, std::numeric_limits<int32_t>::max(), "an integer >= 0");
      break;
    case Form::kFraction:
      parseNumber(u.name, value, 0.0, 1.0, "a number in [0, 1]");
      break;
    case Form::kCoreList: {
      size_t start = 0;
      while (true) {
        size_t comma = value.find(',', start);
        parseInt(u.name, value.substr(start, comma - start), 0, std::numeric_limits<int32_t>::max(),
                 "core ids >= 0 separated by commas, one per local rank, e.g. 0,8");
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      break;
    }
    case Form::kText:
      break;
  }
}

// Horovod's names for kolo's choices are upper case (MPI, GLOO, NCCL).
std::string parseBackend(const Read& r, const std::vector<std::string>& choices) {
  if (!r.horovod) return parseChoice(r.name, r.value, choices);
  for (const auto& c : choices) {
    if (lower(r.value) == c) return c;
  }
  std::string upper;
  for (const auto& c : choices) {
    std::string u = c;
    for (char& ch : u) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    upper += (upper.empty() ? "" : "|") + u;
  }
  badValue(r.name, r.value, "one of " + upper + " (any case)");
}

LogLevel parseLogLevel(const Read& r) {
  static const char* kLevels[] = {"trace", "debug", "info", "warning", "error", "off"};
  std::string level = r.value == "warn" ? "warning" : r.value;
  if (r.horovod) {
    // Horovod's levels, in any case; kolo has no FATAL, its nearest is error.
    level = lower(r.value);
    if (level == "fatal") level = "error";
    if (level == "off" || level == "warn") level = "?";
    if (std::find(std::begin(kLevels), std::end(kLevels), level) == std::end(kLevels)) {
      badValue(r.name, r.value, "one of TRACE|DEBUG|INFO|WARNING|ERROR|FATAL (any case)");
    }
  } else {
    parseChoice(r.name, level, {"trace", "debug", "info", "warning", "error", "off"});
  }
  for (int i = 0; i < 6; ++i) {
    if (level == kLevels[i]) return static_cast<LogLevel>(i);
  }
  return LogLevel::kWarning;
}

}  // namespace

Config Config::fromEnv(const EnvLookup& env) {
  Config c;
  c.notices = std::make_shared<ConfigNotices>();
  Reader reader(env, *c.notices);
  const double kDay = 86400.0;
  if (auto v = reader.get("KOLO_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD")) {
    c.fusionThresholdBytes = parseInt(v->name, v->value, 0, int64_t{1} << 40,
                                      "bytes, an integer >= 0; 0 disables fusion");
  }
  if (auto v = reader.get("KOLO_CYCLE_TIME", "HOROVOD_CYCLE_TIME")) {
    double ms = parseNumber(v->name, v->value, 0.0, 10000.0,
                            "milliseconds between 0 and 10000, e.g. 1 or 0.5");
    c.cycleTime = std::chrono::microseconds(static_cast<int64_t>(std::llround(ms * 1000.0)));
  }
  if (auto v = env("KOLO_SPIN_TIME")) {
    c.spinTime = std::chrono::microseconds(parseInt("KOLO_SPIN_TIME", *v, 0, 1000000,
                                                    "microseconds, an integer >= 0; 0 disables"));
  }
  if (auto v = reader.get("KOLO_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY")) {
    c.cacheCapacity = static_cast<int>(
        parseInt(v->name, v->value, 0, 1 << 20, "an integer >= 0; 0 disables the cache"));
  }
  if (auto v = reader.get("KOLO_TIMEOUT", "HOROVOD_GLOO_TIMEOUT_SECONDS")) {
    c.timeout = seconds(parseNumber(v->name, v->value, 0.001, kDay, "seconds > 0, e.g. 60 or 2.5"));
  }
  std::optional<Read> stallCheck, stallShutdown;
  if ((stallCheck = reader.get("KOLO_STALL_CHECK_TIME", "HOROVOD_STALL_CHECK_TIME_SECONDS"))) {
    c.stallCheckTime = seconds(parseNumber(stallCheck->name, stallCheck->value, 0.0, kDay,
                                           "seconds >= 0; 0 disables the stall check"));
  }
  if ((stallShutdown =
           reader.get("KOLO_STALL_SHUTDOWN_TIME", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"))) {
    c.stallShutdownTime = seconds(parseNumber(stallShutdown->name, stallShutdown->value, 0.0, kDay,
                                              "seconds >= 0; 0 never shuts down on a stall"));
  }
  // Horovod stops stalled jobs only after warning about them.
  if (stallShutdown && stallShutdown->horovod && c.stallShutdownTime.count() > 0 &&
      c.stallShutdownTime < c.stallCheckTime) {
    reader.note(stallShutdown->name + "=" + stallShutdown->value +
                " is below the stall warning time, so (as in Horovod) a stall never ends the job");
    c.stallShutdownTime = std::chrono::milliseconds(0);
  }
  // HOROVOD_STALL_CHECK_DISABLE turns Horovod's whole stall inspector off:
  // no warning and no shutdown, whatever its time variables say.
  if (auto v = env("HOROVOD_STALL_CHECK_DISABLE");
      v && parseHorovodBool("HOROVOD_STALL_CHECK_DISABLE", *v)) {
    if (!reader.has("KOLO_STALL_CHECK_TIME")) c.stallCheckTime = std::chrono::milliseconds(0);
    if (!reader.has("KOLO_STALL_SHUTDOWN_TIME")) c.stallShutdownTime = std::chrono::milliseconds(0);
  }
  if (auto v = reader.get("KOLO_TIMELINE", "HOROVOD_TIMELINE")) {
    if (v->horovod && v->value == "DYNAMIC") {
      reader.note(
          "HOROVOD_TIMELINE=DYNAMIC: kolo needs no file to allow start_timeline(); "
          "no timeline is written until start_timeline() is called");
    } else {
      c.timelinePath = v->value;
    }
  }
  if (auto v = reader.get("KOLO_AUTOTUNE", "HOROVOD_AUTOTUNE")) c.autotune = parseSwitch(*v);
  if (auto v = reader.get("KOLO_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG"))
    c.autotuneLogPath = v->value;
  if (auto v = reader.get("KOLO_AUTOTUNE_WARMUP_SAMPLES", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES")) {
    c.autotuneWarmupSamples =
        static_cast<int>(parseInt(v->name, v->value, 0, 1000, "an integer between 0 and 1000"));
  }
  if (auto v = reader.get("KOLO_AUTOTUNE_SAMPLES")) {
    c.autotuneSamples =
        static_cast<int>(parseInt(v->name, v->value, 1, 1000, "an integer between 1 and 1000"));
  }
  if (auto v = reader.get("KOLO_AUTOTUNE_SAMPLE_TIME")) {
    c.autotuneSampleTime = seconds(
        parseNumber(v->name, v->value, 0.001, 3600.0, "seconds between 0.001 and 3600, e.g. 0.5"));
  }
  if (auto v = reader.get("KOLO_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES")) {
    c.timelineMarkCycles = parseSwitch(*v);
  }
  if (auto v = reader.get("KOLO_LOG_LEVEL", "HOROVOD_LOG_LEVEL")) c.logLevel = parseLogLevel(*v);
  if (auto v = reader.get("KOLO_LOG_HIDE_TIME", "HOROVOD_LOG_HIDE_TIME"))
    c.logHideTime = parseSwitch(*v);
  if (auto v = reader.get("KOLO_CONTROLLER", "HOROVOD_CONTROLLER")) {
    c.controller = parseBackend(*v, {"gloo", "mpi"});
  }
  if (auto v = reader.get("KOLO_CPU_OPERATIONS", "HOROVOD_CPU_OPERATIONS")) {
    if (v->horovod && lower(v->value) == "ccl") {
      reader.note("HOROVOD_CPU_OPERATIONS=" + v->value + ": kolo has no oneCCL backend; CPU " +
                  "operations run on " + c.cpuOperations + " (KOLO_CPU_OPERATIONS)");
    } else {
      c.cpuOperations = parseBackend(*v, {"gloo", "mpi"});
    }
  }
  if (auto v = reader.get("KOLO_GPU_OPERATIONS", "HOROVOD_GPU_OPERATIONS")) {
    c.gpuOperations = parseBackend(*v, {"nccl", "mpi", "gloo"});
  }
  if (auto v = reader.get("KOLO_IFACE", "HOROVOD_GLOO_IFACE")) c.iface = v->value;
  c.shm = parseAuto(reader, "KOLO_SHM", "");
  c.hierarchicalAllreduce =
      parseAuto(reader, "KOLO_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE");
  c.hierarchicalAllgather =
      parseAuto(reader, "KOLO_HIERARCHICAL_ALLGATHER", "HOROVOD_HIERARCHICAL_ALLGATHER");
  if (c.autotune) {
    // Horovod's autotuner holds the parameters set in the environment.
    for (const char* name : {"HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME"}) {
      if (auto v = env(name)) {
        reader.note(std::string(name) + "=" + *v + " with autotuning: kolo's autotuner starts " +
                    "from this value and may change it (Horovod holds it constant)");
      }
    }
  }
  for (const Unused& u : kUnused) {
    if (auto v = env(u.name)) {
      checkUnused(u, *v);
      reader.note(std::string(u.name) + "=" + *v + " has no effect in kolo: " + u.instead);
    }
  }
  // Under mpirun with neither setting given, MPI carries both control and
  // data (in builds with MPI); setting either one turns this off.
  if (KOLO_WITH_MPI && !env("KOLO_CONTROLLER") && !env("KOLO_CPU_OPERATIONS") &&
      !env("HOROVOD_CONTROLLER") && !env("HOROVOD_CPU_OPERATIONS") && startedByMpirun(env)) {
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
