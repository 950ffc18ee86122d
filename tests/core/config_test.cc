#include <gtest/gtest.h>

#include <map>

#include "kolo/config.h"
#include "kolo/error.h"

namespace kolo {
namespace {

EnvLookup envOf(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

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

TEST(LaunchInfo, NoLauncherMeansSizeOne) {
  LaunchInfo info = launchInfoFromEnv(envOf({}));
  EXPECT_EQ(info.launcher, "none");
  EXPECT_EQ(info.identity.size, 1);
  EXPECT_TRUE(info.rendezvous.addr.empty());
}

TEST(LaunchInfo, KoloRunEnvironment) {
  LaunchInfo info = launchInfoFromEnv(envOf({{"KOLO_RANK", "3"}, {"KOLO_SIZE", "4"},
                                             {"KOLO_LOCAL_RANK", "1"}, {"KOLO_LOCAL_SIZE", "2"},
                                             {"KOLO_CROSS_RANK", "1"}, {"KOLO_CROSS_SIZE", "2"},
                                             {"KOLO_RENDEZVOUS_ADDR", "10.0.0.1"},
                                             {"KOLO_RENDEZVOUS_PORT", "4000"},
                                             {"KOLO_SECRET_KEY", "abc"}}));
  EXPECT_EQ(info.launcher, "kolo");
  EXPECT_EQ(info.identity.rank, 3);
  EXPECT_EQ(info.identity.localRank, 1);
  EXPECT_EQ(info.identity.crossSize, 2);
  EXPECT_EQ(info.rendezvous.addr, "10.0.0.1");
  EXPECT_EQ(info.rendezvous.port, 4000);
  EXPECT_FALSE(info.rendezvous.hostServer);
}

TEST(LaunchInfo, KoloRunWithOneRankStillUsesTheJobStore) {
  // kolorun -np 1 waits for the rank to arrive in its store.
  LaunchInfo info = launchInfoFromEnv(envOf({{"KOLO_RANK", "0"}, {"KOLO_SIZE", "1"},
                                             {"KOLO_RENDEZVOUS_ADDR", "127.0.0.1"},
                                             {"KOLO_RENDEZVOUS_PORT", "4000"},
                                             {"KOLO_SECRET_KEY", "abc"}}));
  EXPECT_EQ(info.rendezvous.addr, "127.0.0.1");
  EXPECT_EQ(info.rendezvous.port, 4000);
}

TEST(LaunchInfo, TorchrunRankZeroHostsTheStoreOnMasterPortPlusOne) {
  auto env = std::map<std::string, std::string>{{"RANK", "0"}, {"WORLD_SIZE", "2"},
                                                {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"},
                                                {"MASTER_ADDR", "127.0.0.1"},
                                                {"MASTER_PORT", "29500"}};
  LaunchInfo info = launchInfoFromEnv(envOf(env));
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_TRUE(info.rendezvous.hostServer);
  EXPECT_EQ(info.rendezvous.port, 29501);
  env["RANK"] = "1";
  env["LOCAL_RANK"] = "1";
  EXPECT_FALSE(launchInfoFromEnv(envOf(env)).rendezvous.hostServer);
}

TEST(LaunchInfo, SlurmAndMpirunIdentities) {
  LaunchInfo s = launchInfoFromEnv(envOf({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"},
                                          {"SLURM_LOCALID", "1"}, {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                          {"SLURM_NODEID", "1"}, {"SLURM_NNODES", "2"},
                                          {"MASTER_ADDR", "node1"}, {"MASTER_PORT", "1234"}}));
  EXPECT_EQ(s.launcher, "slurm");
  EXPECT_EQ(s.identity.rank, 5);
  EXPECT_EQ(s.identity.localSize, 4);
  EXPECT_EQ(s.identity.crossRank, 1);
  LaunchInfo m = launchInfoFromEnv(envOf({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                          {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}}));
  EXPECT_EQ(m.launcher, "mpirun");
  EXPECT_EQ(m.identity.localRank, 1);
}

TEST(LaunchInfo, UnderKolorunMpiTheLauncherServesTheStore) {
  auto env = std::map<std::string, std::string>{
      {"OMPI_COMM_WORLD_RANK", "0"},         {"OMPI_COMM_WORLD_SIZE", "2"},
      {"KOLO_RENDEZVOUS_ADDR", "127.0.0.1"}, {"KOLO_RENDEZVOUS_PORT", "4000"},
      {"KOLO_SECRET_KEY", "abc"},            {"KOLO_RENDEZVOUS_HOSTED", "1"}};
  LaunchInfo info = launchInfoFromEnv(envOf(env));
  EXPECT_FALSE(info.rendezvous.hostServer);  // rank 0 connects like every rank
  EXPECT_EQ(info.rendezvous.port, 4000);
  EXPECT_EQ(info.rendezvous.secret, "abc");
  env.erase("KOLO_RENDEZVOUS_HOSTED");
  EXPECT_TRUE(launchInfoFromEnv(envOf(env)).rendezvous.hostServer);
}

TEST(LaunchInfo, InconsistentOrMissingValuesAreClearErrors) {
  EXPECT_THROW(launchInfoFromEnv(envOf({{"KOLO_RANK", "2"}, {"KOLO_SIZE", "2"}})), InvalidArgument);
  EXPECT_THROW(launchInfoFromEnv(envOf({{"KOLO_RANK", "x"}, {"KOLO_SIZE", "2"}})), InvalidArgument);
  try {
    launchInfoFromEnv(envOf({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("set MASTER_ADDR and MASTER_PORT"), std::string::npos);
  }
  try {
    launchInfoFromEnv(envOf({{"KOLO_RANK", "0"}, {"KOLO_SIZE", "2"},
                             {"KOLO_RENDEZVOUS_ADDR", "127.0.0.1"}, {"KOLO_RENDEZVOUS_PORT", "1"}}));
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("KOLO_SECRET_KEY is not set"), std::string::npos);
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

}  // namespace
}  // namespace kolo
