// kolo started the way Kubeflow's MPI operator (kubeflow.org/v2beta1 MPIJob,
// OpenMPI) starts a job: the launcher pod runs mpirun with the operator's
// environment (OMPI_MCA_orte_default_hostfile pointing at its hostfile of
// "<host> slots=<slotsPerWorker>" lines, OMPI_MCA_orte_set_default_slots,
// K_MPI_JOB_ROLE=launcher, ...) and the manifest's mpirun flags; mpirun
// gives every rank OMPI_COMM_WORLD_*. One worker host here (this machine,
// as "localhost"), three slots.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>

#include "core/cluster_env.h"
#include "harness/ports.h"

namespace kolo::testing {
namespace {

using Clock = std::chrono::steady_clock;

class MPIJobLauncher : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/kolo-mpijob-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    std::ofstream(dir_ + "/hostfile") << "localhost slots=3\n";
  }
  void TearDown() override {
    std::remove((dir_ + "/hostfile").c_str());
    rmdir(dir_.c_str());
  }

  // The launcher container's environment as the operator sets it.
  std::map<std::string, std::string> launcherEnv() const {
    return {{"K_MPI_JOB_ROLE", "launcher"},
            {"OMPI_MCA_orte_keep_fqdn_hostnames", "true"},
            {"OMPI_MCA_orte_default_hostfile", dir_ + "/hostfile"},
            {"OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"},
            {"OMPI_MCA_orte_set_default_slots", "3"},
            {"NVIDIA_VISIBLE_DEVICES", ""},
            {"NVIDIA_DRIVER_CAPABILITIES", ""},
            {"KOLO_TIMEOUT", "20"}};
  }

  // The launcher's command (examples/kubernetes/mpijob.yaml) for 3 ranks;
  // no --oversubscribe: the hostfile's slots are what lets 3 ranks run.
  std::vector<std::string> mpirun(const std::vector<std::string>& exports = {}) const {
    std::vector<std::string> argv = {
        KOLO_MPIEXEC, "--allow-run-as-root", "-np", "3", "-bind-to", "none", "-map-by", "slot",
        "-x",         "KOLO_TIMEOUT"};
    for (const auto& name : exports) {
      argv.push_back("-x");
      argv.push_back(name);
    }
    argv.push_back(KOLO_CLUSTER_WORKER);
    return argv;
  }

  std::string dir_;
};

void expectThreeRanks(const Child& c, const std::string& controller) {
  SCOPED_TRACE("mpirun output:\n" + c.output);
  EXPECT_TRUE(c.exitedZero());
  auto reports = reportsIn(c.output);
  ASSERT_EQ(reports.size(), 3u);
  std::vector<bool> seen(3, false);
  for (const WorkerReport& r : reports) {
    ASSERT_GE(r.rank, 0);
    ASSERT_LT(r.rank, 3);
    seen[r.rank] = true;
    EXPECT_EQ(r.size, 3);
    EXPECT_EQ(r.localRank, r.rank);  // the slots of one worker host
    EXPECT_EQ(r.localSize, 3);
    EXPECT_EQ(r.crossRank, 0);
    EXPECT_EQ(r.crossSize, 1);
    EXPECT_EQ(r.sum, 6.0);
    EXPECT_EQ(r.controller, controller);
  }
  EXPECT_EQ(seen, std::vector<bool>(3, true));
}

TEST_F(MPIJobLauncher, MpirunWithTheOperatorsHostfileRunsKoloOverMpi) {
  Child c = startChild(mpirun(), launcherEnv());
  finish(c, Clock::now() + std::chrono::seconds(90));
  expectThreeRanks(c, "mpi");
}

TEST_F(MPIJobLauncher, GlooUnderMpirunWithRankZerosWorkerAsMasterAddr) {
  // A kolo built without MPI, or asked for gloo: mpirun passes the address
  // of rank 0's worker (here this machine) and a port to every rank.
  auto env = launcherEnv();
  env["KOLO_CONTROLLER"] = "gloo";
  env["KOLO_CPU_OPERATIONS"] = "gloo";
  env["MASTER_ADDR"] = "localhost";
  env["MASTER_PORT"] = std::to_string(test::freeListenPort(true) - 1);  // rank 0 serves on MASTER_PORT + 1
  Child c = startChild(
      mpirun({"KOLO_CONTROLLER", "KOLO_CPU_OPERATIONS", "MASTER_ADDR", "MASTER_PORT"}), env);
  finish(c, Clock::now() + std::chrono::seconds(90));
  expectThreeRanks(c, "gloo");
}

}  // namespace
}  // namespace kolo::testing
