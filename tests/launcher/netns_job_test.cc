// Two "hosts" as network namespaces on a bridge (scripts/netns-hosts.sh),
// started through `kolorun --rsh scripts/netns-rsh.sh`. Ranks must run
// inside their namespace and reach kolorun's store across the veth links.
// Only the private test subnet 10.77.NET.0/24 inside these namespaces is used.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <regex>

#include "launcher_test_util.h"

namespace kolo::launcher::testing {
namespace {

using std::chrono::seconds;

class NetnsJob : public ::testing::Test {
 protected:
  void SetUp() override {
    int id = static_cast<int>(getpid() % 100000);
    prefix_ = "kl" + std::to_string(id) + "h";
    // A /24 that no interface here uses yet.
    for (int k = 0; k < 200; ++k) {
      net_ = std::to_string(20 + (id + k) % 200);
      std::string probe = "ip -o -4 addr show | grep -q ' 10\\.77\\." + net_ + "\\.'";
      if (std::system(probe.c_str()) != 0) break;
    }
    script_ = std::string(sourceDir()) + "/scripts/netns-hosts.sh";
    std::string up = script_ + " up " + prefix_ + " 2 " + net_ + " >/dev/null 2>&1";
    if (std::system(up.c_str()) != 0) {
      down();
      GTEST_SKIP() << "cannot create network namespaces here (needs root / CAP_NET_ADMIN "
                      "and `ip`); the multi-host launcher test did not run";
    }
    created_ = true;
  }
  void TearDown() override {
    if (created_) down();
  }
  void down() { std::system((script_ + " down " + prefix_ + " >/dev/null 2>&1").c_str()); }

  std::string ns(int i) const { return prefix_ + std::to_string(i); }
  std::string addr(int host) const { return "10.77." + net_ + "." + std::to_string(host); }
  std::string rsh() const { return std::string(sourceDir()) + "/scripts/netns-rsh.sh"; }
  std::string inode(int i) const {
    struct stat st {};
    if (stat(("/run/netns/" + ns(i)).c_str(), &st) != 0) return "?";
    return std::to_string(st.st_ino);
  }

  std::string prefix_, net_, script_;
  bool created_ = false;
};

TEST_F(NetnsJob, RanksRunInTheirNamespaceAndReachTheStoreAcrossTheVeth) {
  auto r = runKolorun({"-H", addr(2) + ":2," + addr(3) + ":2", "--rsh", rsh(), probePath(), "env",
                       "exchange", "wrong-secret", "arrive"},
                      seconds(60));
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  auto env = envByRank(r.out);
  ASSERT_EQ(env.size(), 4u) << r.out;
  for (int rank = 0; rank < 4; ++rank) {
    auto& e = env[rank];
    int host = rank / 2;
    EXPECT_EQ(e["NETNS"], inode(host + 1)) << "rank " << rank << " is not in " << ns(host + 1);
    EXPECT_EQ(e["KOLO_HOSTNAME"], addr(host + 2));
    EXPECT_EQ(e["KOLO_RENDEZVOUS_ADDR"], addr(1)) << "the route to the first host leaves via the bridge";
    EXPECT_EQ(e["KOLO_LOCAL_RANK"], std::to_string(rank % 2));
    EXPECT_EQ(e["KOLO_CROSS_RANK"], std::to_string(host));
  }
  std::string all = " " + addr(2) + "/0 " + addr(2) + "/1 " + addr(3) + "/2 " + addr(3) + "/3";
  for (int rank = 0; rank < 4; ++rank) {
    std::string p = "[" + std::to_string(rank) + "]<stdout>:";
    EXPECT_NE(r.out.find(p + "EXCHANGE_OK" + all), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(p + "WRONG_SECRET=refused"), std::string::npos) << r.out;
  }
}

// kolorun reaches the namespaces over the bridge; inside, the interface is
// eth0 (the data plane itself runs in tests/reliability's
// HierarchicalAcrossHosts.HostsByNamespaceNameWithAnInterfaceListTrain).
TEST_F(NetnsJob, HostsByNamespaceNameWithNetworkInterface) {
  auto r = runKolorun({"-H", ns(1) + ":1," + ns(2) + ":1", "--rsh", rsh(), "--network-interfaces",
                       prefix_ + "br,eth0", probePath(), "env", "exchange"},
                      seconds(60));
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  auto env = envByRank(r.out);
  EXPECT_EQ(env[0]["KOLO_RENDEZVOUS_ADDR"], addr(1));
  EXPECT_EQ(env[1]["KOLO_IFACE"], prefix_ + "br,eth0");
  EXPECT_EQ(env[1]["NETNS"], inode(2));
  EXPECT_NE(r.out.find("[1]<stdout>:EXCHANGE_OK"), std::string::npos) << r.out;
}

TEST_F(NetnsJob, FailureOnOneHostStopsTheOtherHost) {
  std::string token = uniqueToken("nsfail");
  auto r = runKolorun({"-H", addr(2) + ":2," + addr(3) + ":2", "--rsh", rsh(), "--grace-seconds",
                       "1", probePath(), "tag", token, "exit-if-rank", "2", "9", "sleep", "60"},
                      seconds(60));
  EXPECT_EQ(r.exitCode, 9) << r.err;
  EXPECT_NE(r.err.find("kolorun: rank 2 (host " + addr(3) +
                       ") exited with code 9; stopped the other 3 ranks"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, 6.0);
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(3)).empty());
}

TEST_F(NetnsJob, SigtermToKolorunLeavesNothingInTheNamespaces) {
  std::string token = uniqueToken("nsterm");
  Running run({kolorunPath(), "-H", addr(2) + ":1," + addr(3) + ":1", "--rsh", rsh(), probePath(),
               "tag", token, "env", "spawn-child", "60", "out", "ready", "sleep", "60"});
  ASSERT_TRUE(run.waitForOutput("[0]<stdout>:ready", seconds(20)));
  ASSERT_TRUE(run.waitForOutput("[1]<stdout>:ready", seconds(20)));
  std::string secret = envByRank(run.out())[1]["KOLO_SECRET_KEY"];
  ASSERT_EQ(secret.size(), 64u);
  EXPECT_EQ(processesWith(token).size(), 1u + 2 + 2) << "kolorun, the probes and their children";
  EXPECT_TRUE(processesWith(secret).empty()) << "the secret is on a command line";
  run.signal(SIGTERM);
  auto r = run.wait(seconds(20));
  EXPECT_EQ(r.exitCode, 128 + SIGTERM) << r.err;
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(3)).empty());
}

}  // namespace
}  // namespace kolo::launcher::testing
