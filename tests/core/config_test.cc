#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/env_lookup.h"
#include "kolo/build_config.h"
#include "kolo/config.h"
#include "kolo/engine.h"
#include "kolo/error.h"
#include "kolo/store.h"

namespace kolo {
namespace {

TEST(Config, DefaultsMatchTheDocumentation) {
  Config c = Config::fromEnv(envOf({}));
  EXPECT_EQ(c.fusionThresholdBytes, 128LL << 20);
  EXPECT_EQ(c.cycleTime, std::chrono::milliseconds(1));
  EXPECT_EQ(c.cacheCapacity, 4096);
  EXPECT_EQ(c.timeout, std::chrono::seconds(60));
  EXPECT_EQ(c.stallCheckTime, std::chrono::seconds(60));
  // Finite: a stalled job ends with an error instead of hanging.
  EXPECT_EQ(c.stallShutdownTime, std::chrono::seconds(600));
  EXPECT_EQ(c.logLevel, LogLevel::kWarning);
  EXPECT_EQ(c.controller, "gloo");
  EXPECT_EQ(c.cpuOperations, "gloo");
}

TEST(Config, ParsesEveryVariable) {
  Config c = Config::fromEnv(envOf({{"KOLO_FUSION_THRESHOLD", "1048576"},
                                    {"KOLO_CYCLE_TIME", "0.5"},
                                    {"KOLO_CACHE_CAPACITY", "0"},
                                    {"KOLO_TIMEOUT", "2.5"},
                                    {"KOLO_STALL_CHECK_TIME", "10"},
                                    {"KOLO_STALL_SHUTDOWN_TIME", "30"},
                                    {"KOLO_TIMELINE", "/tmp/t.json"},
                                    {"KOLO_AUTOTUNE", "1"},
                                    {"KOLO_LOG_LEVEL", "debug"},
                                    {"KOLO_CONTROLLER", "gloo"},
                                    {"KOLO_CPU_OPERATIONS", "gloo"},
                                    {"KOLO_GPU_OPERATIONS", "nccl"},
                                    {"KOLO_IFACE", "eth0"}}));
  EXPECT_EQ(c.fusionThresholdBytes, 1048576);
  EXPECT_EQ(c.cycleTime, std::chrono::microseconds(500));
  EXPECT_EQ(c.cacheCapacity, 0);
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(c.stallShutdownTime, std::chrono::seconds(30));
  EXPECT_EQ(c.timelinePath, "/tmp/t.json");
  EXPECT_TRUE(c.autotune);
  EXPECT_EQ(c.logLevel, LogLevel::kDebug);
  EXPECT_EQ(c.iface, "eth0");
}

TEST(Config, MalformedValuesNameTheVariableAndTheAcceptedForm) {
  struct Case {
    std::string var, value, expect;
  };
  std::vector<Case> cases = {
      {"KOLO_FUSION_THRESHOLD", "64MB", "invalid value for KOLO_FUSION_THRESHOLD: '64MB' (expected bytes"},
      {"KOLO_FUSION_THRESHOLD", "-1", "KOLO_FUSION_THRESHOLD"},
      {"KOLO_CYCLE_TIME", "fast", "invalid value for KOLO_CYCLE_TIME: 'fast' (expected milliseconds"},
      {"KOLO_CACHE_CAPACITY", "1.5", "KOLO_CACHE_CAPACITY"},
      {"KOLO_TIMEOUT", "0", "invalid value for KOLO_TIMEOUT: '0' (expected seconds > 0"},
      {"KOLO_TIMEOUT", "nan", "KOLO_TIMEOUT"},
      {"KOLO_STALL_CHECK_TIME", "-3", "KOLO_STALL_CHECK_TIME"},
      {"KOLO_AUTOTUNE", "maybe", "invalid value for KOLO_AUTOTUNE: 'maybe' (expected 1/0"},
      {"KOLO_LOG_LEVEL", "loud", "expected one of trace|debug|info|warning|error|off"},
      {"KOLO_CONTROLLER", "nccl", "invalid value for KOLO_CONTROLLER: 'nccl' (expected one of gloo|mpi)"},
      {"KOLO_CPU_OPERATIONS", "", "KOLO_CPU_OPERATIONS"},
      {"KOLO_GPU_OPERATIONS", "rccl", "one of nccl|mpi|gloo"},
  };
  for (const auto& c : cases) {
    try {
      Config::fromEnv(envOf({{c.var, c.value}}));
      ADD_FAILURE() << c.var << "=" << c.value << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos)
          << c.var << "=" << c.value << ": " << e.what();
    }
  }
}

TEST(Config, SharedMemoryAndHierarchicalSwitches) {
  Config c = Config::fromEnv(envOf({}));
  EXPECT_FALSE(c.shm.has_value());  // auto
  EXPECT_FALSE(c.hierarchicalAllreduce.has_value());
  EXPECT_FALSE(c.hierarchicalAllgather.has_value());

  c = Config::fromEnv(envOf({{"KOLO_SHM", "0"},
                             {"KOLO_HIERARCHICAL_ALLREDUCE", "1"},
                             {"KOLO_HIERARCHICAL_ALLGATHER", "off"}}));
  EXPECT_EQ(c.shm, false);
  EXPECT_EQ(c.hierarchicalAllreduce, true);
  EXPECT_EQ(c.hierarchicalAllgather, false);
  EXPECT_FALSE(Config::fromEnv(envOf({{"KOLO_SHM", "auto"}})).shm.has_value());

  // Horovod's names are aliases; kolo's own name wins when both are set.
  c = Config::fromEnv(envOf({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"},
                             {"HOROVOD_HIERARCHICAL_ALLGATHER", "0"}}));
  EXPECT_EQ(c.hierarchicalAllreduce, true);
  EXPECT_EQ(c.hierarchicalAllgather, false);
  c = Config::fromEnv(envOf({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"},
                             {"KOLO_HIERARCHICAL_ALLREDUCE", "0"}}));
  EXPECT_EQ(c.hierarchicalAllreduce, false);

  for (const auto& [var, value] : std::map<std::string, std::string>{
           {"KOLO_SHM", "maybe"},
           {"KOLO_HIERARCHICAL_ALLREDUCE", "2"},
           {"HOROVOD_HIERARCHICAL_ALLGATHER", "yes please"}}) {
    try {
      Config::fromEnv(envOf({{var, value}}));
      ADD_FAILURE() << var << "=" << value << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(var), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("auto"), std::string::npos) << e.what();
    }
  }
}

// Horovod 0.28.1's runtime variables, in Horovod's units, as aliases.
TEST(HorovodEnv, AliasesTakeHorovodsUnits) {
  Config c = Config::fromEnv(envOf({{"HOROVOD_FUSION_THRESHOLD", "33554432"},  // bytes
                                    {"HOROVOD_CYCLE_TIME", "3.5"},             // ms
                                    {"HOROVOD_CACHE_CAPACITY", "256"},
                                    {"HOROVOD_GLOO_TIMEOUT_SECONDS", "45"},
                                    {"HOROVOD_STALL_CHECK_TIME_SECONDS", "20"},
                                    {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "90"},
                                    {"HOROVOD_TIMELINE", "/tmp/h.json"},
                                    {"HOROVOD_TIMELINE_MARK_CYCLES", "1"},
                                    {"HOROVOD_AUTOTUNE", "2"},  // Horovod: > 0 is on
                                    {"HOROVOD_AUTOTUNE_LOG", "/tmp/h.csv"},
                                    {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "5"},
                                    {"HOROVOD_LOG_LEVEL", "DEBUG"},
                                    {"HOROVOD_LOG_HIDE_TIME", "1"},
                                    {"HOROVOD_CONTROLLER", "GLOO"},
                                    {"HOROVOD_CPU_OPERATIONS", "Gloo"},
                                    {"HOROVOD_GPU_OPERATIONS", "MPI"},
                                    {"HOROVOD_GLOO_IFACE", "eth7"},
                                    {"HOROVOD_HIERARCHICAL_ALLREDUCE", "3"}}));
  EXPECT_EQ(c.fusionThresholdBytes, 32LL << 20);
  EXPECT_EQ(c.cycleTime, std::chrono::microseconds(3500));
  EXPECT_EQ(c.cacheCapacity, 256);
  EXPECT_EQ(c.timeout, std::chrono::seconds(45));
  EXPECT_EQ(c.stallCheckTime, std::chrono::seconds(20));
  EXPECT_EQ(c.stallShutdownTime, std::chrono::seconds(90));
  EXPECT_EQ(c.timelinePath, "/tmp/h.json");
  EXPECT_TRUE(c.timelineMarkCycles);
  EXPECT_TRUE(c.autotune);
  EXPECT_EQ(c.autotuneLogPath, "/tmp/h.csv");
  EXPECT_EQ(c.autotuneWarmupSamples, 5);
  EXPECT_EQ(c.logLevel, LogLevel::kDebug);
  EXPECT_TRUE(c.logHideTime);
  EXPECT_EQ(c.controller, "gloo");
  EXPECT_EQ(c.cpuOperations, "gloo");
  EXPECT_EQ(c.gpuOperations, "mpi");
  EXPECT_EQ(c.iface, "eth7");
  EXPECT_EQ(c.hierarchicalAllreduce, true);
  // Only the autotuner's difference is reported.
  ASSERT_EQ(c.notices->lines.size(), 2u);
  EXPECT_NE(c.notices->lines[0].find("HOROVOD_FUSION_THRESHOLD=33554432 with autotuning"),
            std::string::npos);
  EXPECT_NE(c.notices->lines[1].find("HOROVOD_CYCLE_TIME=3.5 with autotuning"), std::string::npos);

  // Horovod's other spellings: 0 is off, FATAL is kolo's error level.
  c = Config::fromEnv(envOf({{"HOROVOD_AUTOTUNE", "0"},
                             {"HOROVOD_LOG_LEVEL", "fatal"},
                             {"HOROVOD_CYCLE_TIME", "0"},
                             {"HOROVOD_FUSION_THRESHOLD", "0"}}));
  EXPECT_FALSE(c.autotune);
  EXPECT_EQ(c.logLevel, LogLevel::kError);
  EXPECT_EQ(c.cycleTime, std::chrono::microseconds(0));
  EXPECT_EQ(c.fusionThresholdBytes, 0);
  EXPECT_FALSE(Config::fromEnv(envOf({})).logHideTime);
  EXPECT_TRUE(Config::fromEnv(envOf({{"KOLO_LOG_HIDE_TIME", "1"}})).logHideTime);
}

TEST(HorovodEnv, KolosNameWinsAndTheOverriddenAliasIsReported) {
  Config c = Config::fromEnv(envOf({{"KOLO_FUSION_THRESHOLD", "1024"},
                                    {"HOROVOD_FUSION_THRESHOLD", "2048"},
                                    {"KOLO_CYCLE_TIME", "2"},
                                    {"HOROVOD_CYCLE_TIME", "not-even-a-number"},
                                    {"KOLO_LOG_LEVEL", "error"},
                                    {"HOROVOD_LOG_LEVEL", "TRACE"},
                                    {"KOLO_TIMEOUT", "5"},
                                    {"HOROVOD_GLOO_TIMEOUT_SECONDS", "50"}}));
  EXPECT_EQ(c.fusionThresholdBytes, 1024);
  EXPECT_EQ(c.cycleTime, std::chrono::milliseconds(2));
  EXPECT_EQ(c.logLevel, LogLevel::kError);
  EXPECT_EQ(c.timeout, std::chrono::seconds(5));
  ASSERT_EQ(c.notices->lines.size(), 4u);
  EXPECT_EQ(c.notices->lines[0],
            "HOROVOD_FUSION_THRESHOLD=2048 is overridden by KOLO_FUSION_THRESHOLD=1024");
}

TEST(HorovodEnv, BadValuesNameTheHorovodVariable) {
  struct Case {
    std::string var, value, expect;
  };
  std::vector<Case> cases = {
      {"HOROVOD_FUSION_THRESHOLD", "64MB",
       "invalid value for HOROVOD_FUSION_THRESHOLD: '64MB' (expected bytes"},
      {"HOROVOD_CYCLE_TIME", "-1", "HOROVOD_CYCLE_TIME"},
      {"HOROVOD_CACHE_CAPACITY", "lots", "HOROVOD_CACHE_CAPACITY"},
      {"HOROVOD_GLOO_TIMEOUT_SECONDS", "0", "invalid value for HOROVOD_GLOO_TIMEOUT_SECONDS: '0'"},
      {"HOROVOD_STALL_CHECK_TIME_SECONDS", "1m", "HOROVOD_STALL_CHECK_TIME_SECONDS"},
      {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "-5", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"},
      {"HOROVOD_STALL_CHECK_DISABLE", "maybe", "invalid value for HOROVOD_STALL_CHECK_DISABLE"},
      {"HOROVOD_AUTOTUNE", "-1", "HOROVOD_AUTOTUNE: '-1' (expected an integer >= 0"},
      {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "x", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES"},
      {"HOROVOD_TIMELINE_MARK_CYCLES", "sure", "HOROVOD_TIMELINE_MARK_CYCLES"},
      {"HOROVOD_LOG_LEVEL", "loud", "TRACE|DEBUG|INFO|WARNING|ERROR|FATAL"},
      {"HOROVOD_LOG_HIDE_TIME", "y", "HOROVOD_LOG_HIDE_TIME"},
      {"HOROVOD_CONTROLLER", "NCCL",
       "invalid value for HOROVOD_CONTROLLER: 'NCCL' (expected one of GLOO|MPI"},
      {"HOROVOD_CPU_OPERATIONS", "DDL", "HOROVOD_CPU_OPERATIONS"},
      {"HOROVOD_GPU_OPERATIONS", "RCCL", "one of NCCL|MPI|GLOO"},
      {"HOROVOD_HIERARCHICAL_ALLREDUCE", "-1", "HOROVOD_HIERARCHICAL_ALLREDUCE"},
      {"HOROVOD_NUM_NCCL_STREAMS", "two", "HOROVOD_NUM_NCCL_STREAMS"},
      {"HOROVOD_THREAD_AFFINITY", "0,x",
       "invalid value for HOROVOD_THREAD_AFFINITY: 'x' (expected core ids"},
      {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "1.5", "a number in [0, 1]"},
      {"HOROVOD_TORUS_ALLREDUCE", "yes please", "HOROVOD_TORUS_ALLREDUCE"},
  };
  for (const auto& c : cases) {
    try {
      Config::fromEnv(envOf({{c.var, c.value}}));
      ADD_FAILURE() << c.var << "=" << c.value << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    }
  }
}

TEST(HorovodEnv, StallCheckDisableAndShutdownRules) {
  // Horovod's switch turns the whole stall inspector off ...
  Config c = Config::fromEnv(envOf({{"HOROVOD_STALL_CHECK_DISABLE", "1"},
                                    {"HOROVOD_STALL_CHECK_TIME_SECONDS", "10"},
                                    {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "20"}}));
  EXPECT_EQ(c.stallCheckTime.count(), 0);
  EXPECT_EQ(c.stallShutdownTime.count(), 0);
  // ... but kolo's own variables still win.
  c = Config::fromEnv(
      envOf({{"HOROVOD_STALL_CHECK_DISABLE", "1"}, {"KOLO_STALL_SHUTDOWN_TIME", "7"}}));
  EXPECT_EQ(c.stallCheckTime.count(), 0);
  EXPECT_EQ(c.stallShutdownTime, std::chrono::seconds(7));
  c = Config::fromEnv(envOf({{"HOROVOD_STALL_CHECK_DISABLE", "0"}}));
  EXPECT_EQ(c.stallCheckTime, std::chrono::seconds(60));
  // Horovod shuts down only after the warning: a shorter shutdown time is off.
  c = Config::fromEnv(envOf({{"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "30"}}));
  EXPECT_EQ(c.stallShutdownTime.count(), 0);
  ASSERT_EQ(c.notices->lines.size(), 1u);
  EXPECT_NE(c.notices->lines[0].find("below the stall warning time"), std::string::npos);
  c = Config::fromEnv(envOf({{"KOLO_STALL_SHUTDOWN_TIME", "30"}}));  // kolo's rule
  EXPECT_EQ(c.stallShutdownTime, std::chrono::seconds(30));
}

TEST(HorovodEnv, MpirunDefaultYieldsToHorovodsBackendChoice) {
  if (!KOLO_WITH_MPI) GTEST_SKIP() << "kolo was built without MPI (no MPI default to yield)";
  Config c = Config::fromEnv(envOf({{"OMPI_COMM_WORLD_RANK", "0"}}));
  EXPECT_EQ(c.controller, "mpi");
  c = Config::fromEnv(envOf({{"OMPI_COMM_WORLD_RANK", "0"}, {"HOROVOD_CONTROLLER", "gloo"}}));
  EXPECT_EQ(c.controller, "gloo");
  EXPECT_EQ(c.cpuOperations, "gloo");
}

TEST(HorovodEnv, VariablesWithoutMeaningAreReportedWithWhatKoloDoes) {
  const std::map<std::string, std::string> unused = {
      {"HOROVOD_TORUS_ALLREDUCE", "1"},
      {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "10"},
      {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "20"},
      {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.8"},
      {"HOROVOD_MPI_THREADS_DISABLE", "1"},
      {"HOROVOD_BATCH_D2D_MEMCOPIES", "0"},
      {"HOROVOD_NUM_NCCL_STREAMS", "2"},
      {"HOROVOD_CCL_CACHE", "1"},
      {"HOROVOD_ADASUM_MPI_CHUNK_SIZE", "1048576"},
      {"HOROVOD_THREAD_AFFINITY", "0,4,8"},
      {"HOROVOD_DISABLE_GROUP_FUSION", "1"},
      {"HOROVOD_DISABLE_NVTX_RANGES", "1"},
      {"HOROVOD_ENABLE_ASYNC_COMPLETION", "1"},
      {"HOROVOD_DYNAMIC_PROCESS_SETS", "1"},
      {"HOROVOD_ENABLE_XLA_OPS", "0"},
      {"HOROVOD_ELASTIC", "1"},
      {"HOROVOD_GPU_ALLREDUCE", "NCCL"},
      {"HOROVOD_GPU_ALLGATHER", "MPI"},
      {"HOROVOD_GPU_BROADCAST", "NCCL"},
      {"HOROVOD_GPU_ALLTOALL", "NCCL"},
      {"HOROVOD_GPU_REDUCESCATTER", "NCCL"},
      {"HOROVOD_RANK", "0"},
      {"HOROVOD_SIZE", "2"},
      {"HOROVOD_LOCAL_RANK", "0"},
      {"HOROVOD_LOCAL_SIZE", "2"},
      {"HOROVOD_CROSS_RANK", "0"},
      {"HOROVOD_CROSS_SIZE", "1"},
      {"HOROVOD_HOSTNAME", "node1"},
      {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.1"},
      {"HOROVOD_GLOO_RENDEZVOUS_PORT", "4000"},
  };
  const Config defaults = Config::fromEnv(envOf({}));
  for (const auto& [name, value] : unused) {
    Config c = Config::fromEnv(envOf({{name, value}}));
    ASSERT_EQ(c.notices->lines.size(), 1u) << name;
    const std::string& line = c.notices->lines[0];
    EXPECT_EQ(line.rfind(name + "=" + value + " has no effect in kolo: ", 0), 0u) << line;
    EXPECT_GT(line.size(), name.size() + value.size() + 40) << line;  // says what kolo does
    // Nothing else changed.
    EXPECT_EQ(c.fusionThresholdBytes, defaults.fusionThresholdBytes) << name;
    EXPECT_EQ(c.hierarchicalAllreduce, defaults.hierarchicalAllreduce) << name;
    EXPECT_EQ(c.gpuOperations, defaults.gpuOperations) << name;
  }
  // Horovod holds a parameter it was given while autotuning; kolo says it does not.
  Config tuned = Config::fromEnv(envOf({{"HOROVOD_AUTOTUNE", "1"}, {"HOROVOD_CYCLE_TIME", "5"}}));
  ASSERT_EQ(tuned.notices->lines.size(), 1u);
  EXPECT_EQ(tuned.notices->lines[0].rfind("HOROVOD_CYCLE_TIME=5 with autotuning: ", 0), 0u);
  // Values kolo cannot follow are reported too, and the default stays.
  Config c =
      Config::fromEnv(envOf({{"HOROVOD_CPU_OPERATIONS", "CCL"}, {"HOROVOD_TIMELINE", "DYNAMIC"}}));
  EXPECT_EQ(c.cpuOperations, "gloo");
  EXPECT_TRUE(c.timelinePath.empty());
  ASSERT_EQ(c.notices->lines.size(), 2u);
  EXPECT_NE(c.notices->lines[0].find("start_timeline"), std::string::npos);
  EXPECT_NE(c.notices->lines[1].find("oneCCL"), std::string::npos);
}

// The report goes to the engine's log at info level, once per fromEnv
// however many engines are made from that Config.
TEST(HorovodEnv, NoticesAreLoggedOnceAtInfoLevel) {
  auto run = [](const Config& config) {
    Engine engine(config, Identity{}, makeHashStore());
    engine.shutdown();
  };
  std::mutex mu;
  std::vector<std::string> lines;
  auto sink = [&](LogLevel level, const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    if (line.find("HOROVOD_") != std::string::npos) {
      lines.push_back(std::string(toString(level)) + " " + line);
    }
  };
  Config config = Config::fromEnv(envOf({{"HOROVOD_NUM_NCCL_STREAMS", "4"},
                                         {"HOROVOD_LOG_LEVEL", "info"},
                                         {"HOROVOD_LOG_HIDE_TIME", "1"}}));
  config.logSink = sink;
  run(config);
  run(config);  // a second engine (an elastic world, say): not again
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("info [kolo rank 0] [info] HOROVOD_NUM_NCCL_STREAMS=4 has no effect", 0),
            0u)
      << lines[0];

  lines.clear();
  Config fresh =
      Config::fromEnv(envOf({{"HOROVOD_NUM_NCCL_STREAMS", "4"}, {"KOLO_LOG_LEVEL", "info"}}));
  fresh.logSink = sink;
  run(fresh);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("info [20", 0), 0u) << lines[0];  // with its timestamp

  lines.clear();
  Config quiet = Config::fromEnv(envOf({{"HOROVOD_NUM_NCCL_STREAMS", "4"}}));  // warning level
  quiet.logSink = sink;
  run(quiet);
  EXPECT_TRUE(lines.empty());
}

}  // namespace
}  // namespace kolo
