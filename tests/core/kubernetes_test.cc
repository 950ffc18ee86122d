// kolo started the way Kubeflow's training operator starts a PyTorchJob:
// no kolorun, one process per pod, each with exactly the variables the
// operator (kubeflow.org/v1, pkg/controller.v1/pytorch) puts in the pod's
// container, and with the nprocPerNode form's torchrun variables on top.
// Pods are network namespaces on a bridge (scripts/netns-hosts.sh) whose
// /etc/hosts (ip netns exec's /etc/netns/NAME/hosts) resolves the Master's
// service name, as cluster DNS does; ports are the operator's defaults.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "core/cluster_env.h"
#include "core/pytorchjob_env.h"
#include "harness/ports.h"
#include "kolo/tcp_store.h"

namespace kolo::testing {
namespace {

using Clock = std::chrono::steady_clock;
using Env = std::map<std::string, std::string>;

constexpr const char* kMasterService = "pytorchjob-sample-master-0";

Env bounded(Env env) {
  env["KOLO_TIMEOUT"] = "20";  // a rank that cannot rendezvous fails, never hangs
  return env;
}

void expectReport(const Child& c, int rank, int size, int localRank, int localSize, int crossRank,
                  int crossSize) {
  SCOPED_TRACE("rank " + std::to_string(rank) + " output:\n" + c.output);
  EXPECT_TRUE(c.exitedZero());
  auto reports = reportsIn(c.output);
  ASSERT_EQ(reports.size(), 1u);
  const WorkerReport& r = reports[0];
  EXPECT_EQ(r.rank, rank);
  EXPECT_EQ(r.size, size);
  EXPECT_EQ(r.localRank, localRank);
  EXPECT_EQ(r.localSize, localSize);
  EXPECT_EQ(r.crossRank, crossRank);
  EXPECT_EQ(r.crossSize, crossSize);
  EXPECT_EQ(r.sum, size * (size + 1) / 2.0);
}

// Pods as network namespaces; pod i has address 10.77.NET.(i + 2) and an
// /etc/hosts naming the Master's pod by its service name.
class PyTorchJobPods : public ::testing::Test {
 protected:
  void SetUp() override {
    const int id = static_cast<int>(getpid() % 100000);
    prefix_ = "k8" + std::to_string(id) + "p";
    for (int k = 0; k < 200; ++k) {
      net_ = std::to_string(20 + (id + 7 * k) % 200);
      const std::string probe = "ip -o -4 addr show | grep -q ' 10\\.77\\." + net_ + "\\.'";
      if (std::system(probe.c_str()) != 0) break;
    }
    script_ = std::string(KOLO_SOURCE_DIR) + "/scripts/netns-hosts.sh";
  }
  void TearDown() override {
    if (pods_ > 0) {
      std::system((script_ + " down " + prefix_ + " >/dev/null 2>&1").c_str());
      for (int i = 1; i <= pods_; ++i) {
        const std::string dir = "/etc/netns/" + ns(i);
        std::remove((dir + "/hosts").c_str());
        rmdir(dir.c_str());
      }
    }
  }

  // Creates `count` pods; false (and the test skips) without CAP_NET_ADMIN.
  bool makePods(int count) {
    const std::string up =
        script_ + " up " + prefix_ + " " + std::to_string(count) + " " + net_ + " >/dev/null 2>&1";
    pods_ = count;
    if (std::system(up.c_str()) != 0) return false;
    mkdir("/etc/netns", 0755);
    for (int i = 1; i <= count; ++i) {
      const std::string dir = "/etc/netns/" + ns(i);
      if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return false;
      std::ofstream hosts(dir + "/hosts");
      hosts << "127.0.0.1 localhost\n" << address(0) << " " << kMasterService << "\n";
      if (!hosts) return false;
    }
    return true;
  }

  std::string ns(int i) const { return prefix_ + std::to_string(i); }  // 1-based
  std::string address(int pod) const { return "10.77." + net_ + "." + std::to_string(pod + 2); }

  Child startInPod(int pod, const Env& env) const {
    return startChild({"ip", "netns", "exec", ns(pod + 1), KOLO_CLUSTER_WORKER}, env);
  }

  std::string prefix_, net_, script_;
  int pods_ = 0;
};

#define KOLO_MAKE_PODS_OR_SKIP(n)                                                         \
  if (!makePods(n)) {                                                                     \
    GTEST_SKIP() << "cannot create network namespaces here (needs root / CAP_NET_ADMIN, " \
                    "`ip` and /etc/netns); the pods test did not run";                    \
  }

TEST_F(PyTorchJobPods, OneProcessPerPodGetsItsRanksFromTheOperatorsEnvironment) {
  KOLO_MAKE_PODS_OR_SKIP(3);
  std::vector<Child> pods;
  for (int rank = 0; rank < 3; ++rank) {
    // No KOLO_SECRET_KEY: what a manifest that sets nothing of kolo's gets.
    pods.push_back(startInPod(rank, bounded(pytorchJobPod(rank, 3, kMasterService, 23456))));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  for (auto& c : pods) finish(c, deadline);
  // Each pod is a host of one rank: local rank 0 (its one GPU), cross rank
  // = RANK; the data plane runs between pods over their addresses.
  for (int rank = 0; rank < 3; ++rank) expectReport(pods[rank], rank, 3, 0, 1, rank, 3);
}

TEST_F(PyTorchJobPods, TorchrunInEachPodWithNprocPerNodeTwo) {
  KOLO_MAKE_PODS_OR_SKIP(2);
  std::vector<Child> procs;
  for (int node = 0; node < 2; ++node) {
    for (int local = 0; local < 2; ++local) {
      Env env = withTorchrun(pytorchJobPod(node, 2, kMasterService, 23456, "2"), node, 2, local, 2);
      env["KOLO_SECRET_KEY"] = "from-a-kubernetes-secret";
      procs.push_back(startInPod(node, bounded(env)));
    }
  }
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  for (auto& c : procs) finish(c, deadline);
  for (int node = 0; node < 2; ++node) {
    for (int local = 0; local < 2; ++local) {
      expectReport(procs[node * 2 + local], node * 2 + local, 4, local, 2, node, 2);
    }
  }
}

TEST(PyTorchJobEnvironment, OnOneMachineOverLocalhost) {
  // The operator's variables with the Master's service name replaced by
  // localhost: every rank on this machine, found through the resolver.
  const int masterPort = test::freeListenPort(true) - 1;
  std::vector<Child> procs;
  for (int rank = 0; rank < 3; ++rank) {
    procs.push_back(startChild({KOLO_CLUSTER_WORKER},
                               bounded(pytorchJobPod(rank, 3, "localhost", masterPort))));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  for (auto& c : procs) finish(c, deadline);
  for (int rank = 0; rank < 3; ++rank) expectReport(procs[rank], rank, 3, rank, 3, 0, 1);
}

TEST(PyTorchJobEnvironment, SeveralProcessesPerPodWithoutTorchrunFailAtInit) {
  Child c =
      startChild({KOLO_CLUSTER_WORKER}, bounded(pytorchJobPod(1, 2, kMasterService, 23456, "4")));
  const auto start = Clock::now();
  finish(c, start + std::chrono::seconds(30));
  EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 3) << c.output;
  EXPECT_NE(c.output.find("PET_NPROC_PER_NODE=4"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("start the container's program with torchrun"), std::string::npos)
      << c.output;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));  // at once, not at the timeout
}

}  // namespace
}  // namespace kolo::testing
