// launchInfoFromEnv: who this process is (rank, size, hosts) and where the
// rendezvous store is, from the environment of each launcher kolo supports:
// kolorun, torchrun, Slurm, mpirun, Kubeflow's PyTorchJob and MPIJob.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/env_lookup.h"
#include "core/pytorchjob_env.h"
#include "kolo/build_config.h"
#include "kolo/config.h"
#include "kolo/error.h"

namespace kolo {
namespace {

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
constexpr const char* kSampleMaster = "pytorchjob-sample-master-0";

std::map<std::string, std::string> samplePod(int rank) {
  return pytorchJobPod(rank, 4, kSampleMaster, 23456);
}

TEST(LaunchInfo, KubeflowPyTorchJobPodIsOneHostOfOneRank) {
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("pod of rank " + std::to_string(rank));
    LaunchInfo info = launchInfoFromEnv(envOf(samplePod(rank)));
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
    EXPECT_EQ(info.rendezvous.secret, launchInfoFromEnv(envOf(samplePod(0))).rendezvous.secret);
  }
  auto env = samplePod(2);
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
    auto env = samplePod(2);
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
std::map<std::string, std::string> torchrunInSamplePod(int node, int local) {
  return withTorchrun(pytorchJobPod(node, 2, kSampleMaster, 23456, "2"), node, 2, local, 2);
}

TEST(LaunchInfo, TorchrunInsideAPyTorchJobPod) {
  for (int node = 0; node < 2; ++node) {
    for (int local = 0; local < 2; ++local) {
      SCOPED_TRACE("pod " + std::to_string(node) + ", local rank " + std::to_string(local));
      LaunchInfo info = launchInfoFromEnv(envOf(torchrunInSamplePod(node, local)));
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
  auto env = torchrunInSamplePod(1, 0);
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

}  // namespace
}  // namespace kolo
