#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "kolo/build_config.h"
#include "kolo/config.h"
#include "kolo/engine.h"
#include "kolo/error.h"
#include "kolo/store.h"

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

// What the Kubeflow training operator (kubeflow.org/v1 PyTorchJob,
// pkg/controller.v1/pytorch/envvar.go and master.go) puts in each replica's
// container for a job "pytorchjob-sample" with one Master and three Workers,
// no nprocPerNode given (defaulted to "auto") and the default port
// pytorchjob-port 23456: RANK is the Master's 0 and Worker i's i+1.
std::map<std::string, std::string> pytorchJobPod(int rank) {
  return {{"PYTHONUNBUFFERED", "1"},
          {"MASTER_PORT", "23456"},
          {"PET_MASTER_PORT", "23456"},
          {"MASTER_ADDR", "pytorchjob-sample-master-0"},
          {"PET_MASTER_ADDR", "pytorchjob-sample-master-0"},
          {"WORLD_SIZE", "4"},
          {"RANK", std::to_string(rank)},
          {"PET_NODE_RANK", std::to_string(rank)},
          {"PET_NPROC_PER_NODE", "auto"},
          {"PET_NNODES", "4"}};
}

TEST(LaunchInfo, KubeflowPyTorchJobPodIsOneHostOfOneRank) {
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("pod of rank " + std::to_string(rank));
    LaunchInfo info = launchInfoFromEnv(envOf(pytorchJobPod(rank)));
    EXPECT_EQ(info.launcher, "torchrun");
    EXPECT_EQ(info.identity.rank, rank);
    EXPECT_EQ(info.identity.size, 4);
    EXPECT_EQ(info.identity.localRank, 0);  // the pod's one GPU, cuda:0
    EXPECT_EQ(info.identity.localSize, 1);
    EXPECT_EQ(info.identity.crossRank, rank);
    EXPECT_EQ(info.identity.crossSize, 4);
    // The Master's pod serves kolo's store beside MASTER_PORT; every pod
    // (the Master too) reaches it through the Master's service name.
    EXPECT_EQ(info.rendezvous.addr, "pytorchjob-sample-master-0");
    EXPECT_EQ(info.rendezvous.port, 23457);
    EXPECT_EQ(info.rendezvous.hostServer, rank == 0);
    EXPECT_FALSE(info.rendezvous.secret.empty());
    EXPECT_EQ(info.rendezvous.secret, launchInfoFromEnv(envOf(pytorchJobPod(0))).rendezvous.secret);
  }
  auto env = pytorchJobPod(2);
  env["KOLO_SECRET_KEY"] = "from-a-kubernetes-secret";
  EXPECT_EQ(launchInfoFromEnv(envOf(env)).rendezvous.secret, "from-a-kubernetes-secret");
  env["KOLO_RENDEZVOUS_PORT"] = "29400";
  env["KOLO_RENDEZVOUS_ADDR"] = "pytorchjob-sample-master-0";
  EXPECT_EQ(launchInfoFromEnv(envOf(env)).rendezvous.port, 29400);
}

TEST(LaunchInfo, RankEnvironmentOverLoopbackIsOneHost) {
  // The same variables set by hand on one machine: every rank reaches rank
  // 0 over loopback, so all of them share this host.
  for (const char* addr : {"127.0.0.1", "localhost"}) {
    auto env = pytorchJobPod(2);
    env["MASTER_ADDR"] = addr;
    LaunchInfo info = launchInfoFromEnv(envOf(env));
    EXPECT_EQ(info.identity.localRank, 2) << addr;
    EXPECT_EQ(info.identity.localSize, 4) << addr;
    EXPECT_EQ(info.identity.crossRank, 0) << addr;
    EXPECT_EQ(info.identity.crossSize, 1) << addr;
    EXPECT_EQ(info.rendezvous.addr, addr);
  }
}

// nprocPerNode: "2" with one Master and one Worker: the operator sets
// WORLD_SIZE=4 and RANK=PET_NODE_RANK=pod index, and the container runs
// torchrun, which starts two processes per pod with its own variables
// (torch/distributed/elastic/agent/server/local_elastic_agent.py) on top of
// the pod's.
std::map<std::string, std::string> torchrunInPytorchJobPod(int node, int local) {
  auto env = pytorchJobPod(node);
  env["WORLD_SIZE"] = "4";
  env["PET_NNODES"] = "2";
  env["PET_NPROC_PER_NODE"] = "2";
  env["RANK"] = std::to_string(node * 2 + local);
  env["LOCAL_RANK"] = std::to_string(local);
  env["GROUP_RANK"] = std::to_string(node);
  env["ROLE_RANK"] = std::to_string(node * 2 + local);
  env["ROLE_NAME"] = "default";
  env["LOCAL_WORLD_SIZE"] = "2";
  env["GROUP_WORLD_SIZE"] = "2";
  env["ROLE_WORLD_SIZE"] = "4";
  env["TORCHELASTIC_RESTART_COUNT"] = "0";
  env["TORCHELASTIC_MAX_RESTARTS"] = "0";
  env["TORCHELASTIC_RUN_ID"] = "none";
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["OMP_NUM_THREADS"] = "1";
  return env;
}

TEST(LaunchInfo, TorchrunInsideAPyTorchJobPod) {
  for (int node = 0; node < 2; ++node) {
    for (int local = 0; local < 2; ++local) {
      SCOPED_TRACE("pod " + std::to_string(node) + ", local rank " + std::to_string(local));
      LaunchInfo info = launchInfoFromEnv(envOf(torchrunInPytorchJobPod(node, local)));
      EXPECT_EQ(info.identity.rank, node * 2 + local);
      EXPECT_EQ(info.identity.size, 4);
      EXPECT_EQ(info.identity.localRank, local);
      EXPECT_EQ(info.identity.localSize, 2);
      EXPECT_EQ(info.identity.crossRank, node);
      EXPECT_EQ(info.identity.crossSize, 2);
      // torchrun's agent store holds MASTER_PORT; kolo's is next to it.
      EXPECT_EQ(info.rendezvous.addr, "pytorchjob-sample-master-0");
      EXPECT_EQ(info.rendezvous.port, 23457);
      EXPECT_EQ(info.rendezvous.hostServer, node == 0 && local == 0);
    }
  }
}

TEST(LaunchInfo, PyTorchJobWithSeveralProcessesPerPodButNoTorchrunIsAClearError) {
  auto env = torchrunInPytorchJobPod(1, 0);
  for (const char* name : {"LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
                           "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
                           "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                           "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS"}) {
    env.erase(name);
  }
  env["RANK"] = "1";  // what the operator sets for the Worker's pod
  try {
    launchInfoFromEnv(envOf(env));
    ADD_FAILURE() << "a pod process without torchrun was accepted";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("PET_NPROC_PER_NODE=2"), std::string::npos) << what;
    EXPECT_NE(what.find("start the container's program with torchrun"), std::string::npos) << what;
  }
  env["PET_NPROC_PER_NODE"] = "1";
  env["WORLD_SIZE"] = "2";
  EXPECT_EQ(launchInfoFromEnv(envOf(env)).identity.crossRank, 1);
}

// An MPIJob (kubeflow.org/v2beta1): the launcher pod runs mpirun with the
// operator's hostfile (/etc/mpi/hostfile, "<job>-worker-<i>.<job>.<ns>.svc
// slots=<slotsPerWorker>"), and mpirun gives each rank OMPI_COMM_WORLD_*;
// ranks fill a worker's slots before the next worker's.
TEST(LaunchInfo, KubeflowMPIJobRanks) {
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    auto env =
        std::map<std::string, std::string>{{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
                                           {"OMPI_COMM_WORLD_SIZE", "4"},
                                           {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank % 2)},
                                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                           {"OMPI_COMM_WORLD_NODE_RANK", std::to_string(rank / 2)},
                                           {"OMPI_UNIVERSE_SIZE", "4"},
                                           {"OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"},
                                           {"OMPI_MCA_orte_keep_fqdn_hostnames", "true"}};
    if (KOLO_WITH_MPI) {
      // A kolo built without MPI (the sanitizer builds) defaults to gloo,
      // which needs MASTER_ADDR: the second half below.
      EXPECT_EQ(Config::fromEnv(envOf(env)).controller, "mpi");  // the default under mpirun
      LaunchInfo info = launchInfoFromEnv(envOf(env));
      EXPECT_EQ(info.launcher, "mpirun");
      EXPECT_EQ(info.identity.rank, rank);
      EXPECT_EQ(info.identity.localRank, rank % 2);
      EXPECT_EQ(info.identity.localSize, 2);
      EXPECT_EQ(info.identity.crossRank, rank / 2);
      EXPECT_EQ(info.identity.crossSize, 2);
      EXPECT_TRUE(info.rendezvous.addr.empty());  // MPI carries everything
    }
    // Gloo under mpirun (a kolo built without MPI, or asked for): the
    // launcher passes rank 0's worker as MASTER_ADDR (mpirun -x).
    env["KOLO_CONTROLLER"] = "gloo";
    env["KOLO_CPU_OPERATIONS"] = "gloo";
    env["MASTER_ADDR"] = "mpijob-sample-worker-0.mpijob-sample.default.svc";
    env["MASTER_PORT"] = "29500";
    LaunchInfo gloo = launchInfoFromEnv(envOf(env));
    EXPECT_EQ(gloo.launcher, "mpirun");
    EXPECT_EQ(gloo.identity.rank, rank);
    EXPECT_EQ(gloo.identity.localRank, rank % 2);
    EXPECT_EQ(gloo.identity.crossRank, rank / 2);
    EXPECT_EQ(gloo.identity.crossSize, 2);
    EXPECT_EQ(gloo.rendezvous.addr, "mpijob-sample-worker-0.mpijob-sample.default.svc");
    EXPECT_EQ(gloo.rendezvous.port, 29501);
    EXPECT_EQ(gloo.rendezvous.hostServer, rank == 0);
  }
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
