#include "horovod_flags.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "usage_error.h"

namespace kolo::launcher {
namespace {

// Horovod's --log-level names are upper case (and include FATAL).
std::string koloLogLevel(const std::string& level, std::vector<std::string>& notices) {
  std::string lower = level;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "fatal") {
    notices.push_back(
        "--log-level FATAL: kolo has no fatal level; it logs errors only "
        "(KOLO_LOG_LEVEL=error)");
    return "error";
  }
  return lower;
}

std::vector<std::string> splitInterfaces(const std::string& value, const char* flag) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = value.find(',', start);
    std::string name = value.substr(start, comma - start);
    if (name.empty()) {
      throw UsageError(std::string(flag) + " '" + value +
                       "': expected interface names separated by commas, e.g. eth0,eth1");
    }
    out.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

double secondsFromEnv(const EnvLookup& env, const char* name, double fallback) {
  auto v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  double value = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || !std::isfinite(value) || value < 0) {
    throw UsageError(std::string(name) + "='" + *v + "': expected seconds >= 0");
  }
  return value;
}

void applyHorovodSpellings(const HorovodSpellings& given, Options& o) {
  if (given.logHideTimestamp) {
    o.notices.push_back(
        std::string(*given.logHideTimestamp ? "--log-hide-timestamp" : "--no-log-hide-timestamp") +
        ": deprecated in Horovod; use " +
        (*given.logHideTimestamp ? "--log-without-timestamp" : "--log-with-timestamp"));
    if (!o.logWithTimestamp) o.logWithTimestamp = !*given.logHideTimestamp;
  }
  for (const auto& v : given.networkInterface) {
    if (v.find(',') != std::string::npos) {
      o.notices.push_back("--network-interface " + v +
                          ": a list is deprecated in Horovod; use "
                          "--network-interfaces " +
                          v);
    }
    for (auto& nic : splitInterfaces(v, "--network-interface")) o.networkInterfaces.push_back(nic);
  }
  for (const auto& v : given.networkInterfaces) {
    for (auto& nic : splitInterfaces(v, "--network-interfaces")) o.networkInterfaces.push_back(nic);
  }
  std::vector<std::string> unique;
  for (auto& nic : o.networkInterfaces) {
    if (std::find(unique.begin(), unique.end(), nic) == unique.end()) unique.push_back(nic);
  }
  o.networkInterfaces = std::move(unique);
  o.networkInterface.clear();
  for (const auto& nic : o.networkInterfaces) {
    o.networkInterface += (o.networkInterface.empty() ? "" : ",") + nic;
  }
  if (!given.logLevel.empty()) o.logLevel = koloLogLevel(given.logLevel, o.notices);
}

void addHorovodNotices(Options& o) {
  auto& n = o.notices;
  if (o.disableCache) {
    n.push_back(
        "--disable-cache: kolorun caches no start-up checks between runs, so there is "
        "nothing to disable");
  }
  if (o.jsrun) {
    n.push_back(
        "--jsrun: kolo does not start jobs through jsrun; kolorun starts the ranks "
        "itself (ssh for other hosts) with Gloo");
  }
  if (o.torusAllreduce) {
    n.push_back(std::string(*o.torusAllreduce ? "--torus-allreduce" : "--no-torus-allreduce") +
                ": kolo has no NCCL torus allreduce; its two-level allreduce is "
                "--hierarchical-allreduce (KOLO_HIERARCHICAL_ALLREDUCE)");
  }
  if (o.autotuneStepsPerSample) {
    n.push_back(
        "--autotune-steps-per-sample: kolo's autotuner measures each sample over a time "
        "(KOLO_AUTOTUNE_SAMPLE_TIME, seconds), not over a number of steps");
  }
  if (o.autotuneBayesOptMaxSamples) {
    n.push_back(
        "--autotune-bayes-opt-max-samples: kolo's autotuner searches small fixed grids "
        "one parameter at a time, not by Bayesian optimisation (KOLO_AUTOTUNE_SAMPLES "
        "sets the samples per setting)");
  }
  if (o.autotuneGaussianProcessNoise) {
    n.push_back(
        "--autotune-gaussian-process-noise: kolo's autotuner has no Gaussian process; "
        "it scores each setting by the median of its samples");
  }
  if (o.mpiThreadsDisable) {
    n.push_back(
        std::string(*o.mpiThreadsDisable ? "--mpi-threads-disable" : "--no-mpi-threads-disable") +
        ": kolo initialises MPI with MPI_THREAD_SERIALIZED, which its background "
        "thread needs");
  }
  if (!o.mpiArgs.empty() && !o.mpi) {
    n.push_back(
        "--mpi-args: used only with --mpi (kolorun runs this job itself, without "
        "mpirun); ignored");
  }
  if (!o.bindingArgs.empty() && !o.mpi) {
    n.push_back(
        "--binding-args: used only with --mpi (kolorun runs this job itself, without "
        "mpirun and without binding ranks); ignored");
  }
  if (o.numNcclStreams) {
    n.push_back(
        "--num-nccl-streams: kolo runs GPU collectives on one communication stream per "
        "device, shared by every process set; ignored");
  }
  if (o.threadAffinity) {
    n.push_back(
        "--thread-affinity: kolo does not pin its background thread; pin the ranks with "
        "--mpi --binding-args or taskset/numactl instead; ignored");
  }
  if (o.glooTimeoutSeconds && o.timeoutSeconds) {
    n.push_back("--gloo-timeout-seconds: --timeout-seconds (KOLO_TIMEOUT) is also given and wins");
  }
  if (o.mpi && o.startTimeoutGiven) {
    n.push_back(
        "--start-timeout: with --mpi, mpirun starts the ranks and kolorun does not time "
        "their start");
  }
  if (o.noStallCheck.value_or(false) &&
      (o.stallCheckWarningSeconds || o.stallCheckShutdownSeconds)) {
    n.push_back(
        "--no-stall-check: the stall check is off, so its time flags have no effect "
        "(as in Horovod)");
  }
  if (o.autotune.value_or(false)) {
    // Horovod holds explicitly set parameters constant while tuning.
    std::string held;
    if (o.fusionThresholdMb) held += " --fusion-threshold-mb";
    if (o.cycleTimeMs) held += " --cycle-time-ms";
    if (o.cacheCapacity && *o.cacheCapacity > 0) held += " --cache-capacity";
    if (!held.empty()) {
      n.push_back("--autotune:" + held +
                  ": kolo's autotuner starts from the value given and may "
                  "change it (Horovod holds it constant); --hierarchical-allreduce and "
                  "--no-hierarchical-allreduce are held");
    }
  }
}

}  // namespace kolo::launcher
