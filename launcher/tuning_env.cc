#include "tuning_env.h"

#include <cmath>

namespace kolo::launcher {

EnvList tuningEnv(const Options& o) {
  EnvList env;
  auto onOff = [](bool on) { return std::string(on ? "1" : "0"); };
  if (o.fusionThresholdMb) {
    env.emplace_back("KOLO_FUSION_THRESHOLD",
                     formatNumber(std::floor(*o.fusionThresholdMb * 1024.0 * 1024.0)));
  }
  if (o.cycleTimeMs) env.emplace_back("KOLO_CYCLE_TIME", formatNumber(*o.cycleTimeMs));
  if (o.cacheCapacity) env.emplace_back("KOLO_CACHE_CAPACITY", std::to_string(*o.cacheCapacity));
  if (!o.timelineFilename.empty()) env.emplace_back("KOLO_TIMELINE", o.timelineFilename);
  if (o.autotune) env.emplace_back("KOLO_AUTOTUNE", onOff(*o.autotune));
  if (!o.autotuneLogFile.empty()) env.emplace_back("KOLO_AUTOTUNE_LOG", o.autotuneLogFile);
  if (!o.logLevel.empty()) env.emplace_back("KOLO_LOG_LEVEL", o.logLevel);
  const bool stallOff = o.noStallCheck.value_or(false);
  if (o.stallCheckWarningSeconds && !stallOff) {
    env.emplace_back("KOLO_STALL_CHECK_TIME", formatNumber(*o.stallCheckWarningSeconds));
  }
  if (o.stallCheckShutdownSeconds && !stallOff) {
    // Horovod shuts a stalled job down only after its warning.
    const double warning = o.stallCheckWarningSeconds.value_or(60);
    const double shutdown = *o.stallCheckShutdownSeconds;
    env.emplace_back("KOLO_STALL_SHUTDOWN_TIME",
                     formatNumber(shutdown > 0 && shutdown < warning ? 0 : shutdown));
  }
  if (o.timeoutSeconds) {
    env.emplace_back("KOLO_TIMEOUT", formatNumber(*o.timeoutSeconds));
  } else if (o.glooTimeoutSeconds) {
    env.emplace_back("KOLO_TIMEOUT", formatNumber(*o.glooTimeoutSeconds));
  }
  if (!o.networkInterface.empty()) env.emplace_back("KOLO_IFACE", o.networkInterface);
  if (o.gloo) {
    env.emplace_back("KOLO_CONTROLLER", "gloo");
    env.emplace_back("KOLO_CPU_OPERATIONS", "gloo");
  }
  if (o.mpi) {
    env.emplace_back("KOLO_CONTROLLER", "mpi");
    env.emplace_back("KOLO_CPU_OPERATIONS", "mpi");
  }
  // Horovod's flags that kolo follows beyond the ones above.
  if (o.hierarchicalAllreduce) {
    env.emplace_back("KOLO_HIERARCHICAL_ALLREDUCE", onOff(*o.hierarchicalAllreduce));
  }
  if (o.hierarchicalAllgather) {
    env.emplace_back("KOLO_HIERARCHICAL_ALLGATHER", onOff(*o.hierarchicalAllgather));
  }
  if (o.timelineMarkCycles)
    env.emplace_back("KOLO_TIMELINE_MARK_CYCLES", onOff(*o.timelineMarkCycles));
  if (o.autotuneWarmupSamples) {
    env.emplace_back("KOLO_AUTOTUNE_WARMUP_SAMPLES", std::to_string(*o.autotuneWarmupSamples));
  }
  if (stallOff) {
    env.emplace_back("KOLO_STALL_CHECK_TIME", "0");
    env.emplace_back("KOLO_STALL_SHUTDOWN_TIME", "0");
  }
  if (o.logWithTimestamp) env.emplace_back("KOLO_LOG_HIDE_TIME", onOff(!*o.logWithTimestamp));
  if (!o.networkInterfaces.empty()) {
    std::string all;
    for (const auto& nic : o.networkInterfaces) all += (all.empty() ? "" : ",") + nic;
    env.emplace_back("NCCL_SOCKET_IFNAME", all);
  }
  if (o.tcp) env.emplace_back("NCCL_IB_DISABLE", "1");
  return env;
}

}  // namespace kolo::launcher
