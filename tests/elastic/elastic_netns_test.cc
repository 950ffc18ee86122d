// Elastic jobs across two "hosts" (network namespaces on a bridge,
// scripts/netns-hosts.sh) started through `kolorun --rsh scripts/netns-rsh.sh`:
// a killed worker on the second host, and a host that appears in the
// discovery script's output while the job trains. Each test process builds
// and removes its own namespaces (named after its pid) on a free
// 10.77.NET.0/24; without root they skip, saying why.
#include <gtest/gtest.h>

#include <cstdlib>

#include "elastic_test_util.h"

namespace kolo::elastic::testing {
namespace {

using launcher::testing::uniqueToken;
using launcher::testing::waitForNoProcessesWith;

class ElasticNetns : public ::testing::TestWithParam<Lang> {
 protected:
  void SetUp() override {
    if (GetParam() == Lang::kPython && !havePython()) {
      GTEST_SKIP() << "the kolo Python package is not built (no interpreter with torch)";
    }
    int id = static_cast<int>(getpid() % 100000);
    prefix_ = "ke" + std::to_string(id) + "h";
    for (int k = 0; k < 200; ++k) {
      net_ = std::to_string(20 + (id + 7 + k) % 200);
      std::string probe = "ip -o -4 addr show | grep -q ' 10\\.77\\." + net_ + "\\.'";
      if (std::system(probe.c_str()) != 0) break;
    }
    script_ = std::string(launcher::testing::sourceDir()) + "/scripts/netns-hosts.sh";
    std::string up = script_ + " up " + prefix_ + " 2 " + net_ + " >/dev/null 2>&1";
    if (std::system(up.c_str()) != 0) {
      down();
      GTEST_SKIP() << "cannot create network namespaces here (needs root / CAP_NET_ADMIN "
                      "and `ip`); the two-host elastic tests did not run";
    }
    created_ = true;
  }
  void TearDown() override {
    if (created_) down();
  }
  void down() { std::system((script_ + " down " + prefix_ + " >/dev/null 2>&1").c_str()); }

  Lang lang() const { return GetParam(); }
  std::string addr(int host) const { return "10.77." + net_ + "." + std::to_string(host + 1); }
  std::string rsh() const {
    return std::string(launcher::testing::sourceDir()) + "/scripts/netns-rsh.sh";
  }
  milliseconds startBound() const { return lang() == Lang::kCpp ? seconds(40) : seconds(60); }

  std::string prefix_, net_, script_;
  bool created_ = false;
};

std::string paramName(const ::testing::TestParamInfo<Lang>& info) { return langName(info.param); }

// SIGKILL one of 4 workers (2 per host), one on the second host: the other
// 3 continue from the last commit.
TEST_P(ElasticNetns, KillAWorkerOnTheSecondHostTheOtherThreeContinue) {
  const std::string token = uniqueToken("enkill");
  const std::string h1 = addr(1), h2 = addr(2);
  ElasticRun run(lang(),
                 {"-np", "4", "--min-np", "2", "-H", h1 + ":2," + h2 + ":2", "--rsh", rsh(),
                  "--timeout-seconds", "10", "--grace-seconds", "2"},
                 {"--epochs", "2", "--samples", "512", "--batch", "8", "--commit-every", "4"},
                 token);
  ASSERT_TRUE(run.waitForStep(1, 0, 6, startBound())) << run.running().err();
  auto log = ElasticLog::parse(run.running().out(), "");
  ASSERT_EQ(log.hostOf[3], h2);
  const int64_t killedAt = run.signalWorker(3, SIGKILL);
  ASSERT_TRUE(run.waitForWorld(2, seconds(30))) << run.running().err();
  auto r = run.finish(seconds(60));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  log = ElasticLog::parse(r.out, r.err);
  EXPECT_EQ(log.workersOf(2), (std::vector<int64_t>{0, 1, 2})) << r.err << "\n" << r.out;
  EXPECT_NE(r.err.find("kolorun: worker 3 (rank 3 of world 1, host " + h2 + ") exited with code " +
                       "137 (SIGKILL on the remote host?)"),
            std::string::npos)
      << r.err;
  const int64_t recovery = log.firstStepTime(2) - killedAt;
  report(std::string(langName(lang())) + " two-host kill: SIGKILL to the first step of world 2: " + std::to_string(recovery) +
         " ms");
  EXPECT_LT(recovery, 3000);
  expectTrainedConsistently(log, 2, 512);
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(5)).empty());
}

// The discovery script starts listing a second host: kolorun starts its
// workers, and once they wait in init() the job grows from 2 to 4 ranks at
// the next commit; the new ranks get the state and nobody hangs
// (horovod#2652).
TEST_P(ElasticNetns, HostAppearsTheJobGrowsFromTwoToFourRanks) {
  const std::string token = uniqueToken("engrow");
  Scratch dir;
  HostsFile hosts(dir.path());
  const std::string h1 = addr(1), h2 = addr(2);
  hosts.set(h1 + ":2\n");
  const std::string stop = dir.path() + "/stop";
  ElasticRun run(lang(),
                 {"-np", "2", "--max-np", "4", "--host-discovery-script", hosts.script(),
                  "--discovery-interval", "0.2", "--rsh", rsh(), "--timeout-seconds", "10",
                  "--grace-seconds", "2"},
                 {"--epochs", "1000", "--samples", "512", "--batch", "8", "--commit-every", "4",
                  "--stop-file", stop},
                 token);
  ASSERT_TRUE(run.waitForStep(1, 0, 4, startBound())) << run.running().err();
  hosts.set(h1 + ":2\n" + h2 + ":2\n");
  const int64_t listedAt = realtimeMs();
  ASSERT_TRUE(run.waitForWorld(2, startBound())) << run.running().err();
  const int64_t grownAt = realtimeMs();
  std::ofstream(stop) << "stop\n";
  auto r = run.finish(seconds(90));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  auto log = ElasticLog::parse(r.out, r.err);
  ASSERT_EQ(log.worldSize.at(1), 2);
  ASSERT_EQ(log.worldSize.at(2), 4) << r.err;
  // The first workers keep ranks 0 and 1; the new ones on h2 are 2 and 3.
  for (const auto& w : log.worlds) {
    if (w.world != 2) continue;
    EXPECT_EQ(log.hostOf.at(w.worker), w.rank < 2 ? h1 : h2) << "worker " << w.worker;
    if (w.rank < 2) EXPECT_LT(w.worker, 2);
  }
  EXPECT_NE(r.err.find("kolorun: world 1 re-forms at its next commit: workers 2,3 ready to join"),
            std::string::npos)
      << r.err;
  report(std::string(langName(lang())) + " host added: listed to the first step with 4 ranks: " +
         std::to_string(log.firstStepTime(2) - listedAt) + " ms");
  EXPECT_LT(grownAt - listedAt, 30000);
  expectTrainedConsistently(log, static_cast<int>(log.done.front().epochs), 512);
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(5)).empty());
}

INSTANTIATE_TEST_SUITE_P(Lang, ElasticNetns, ::testing::Values(Lang::kCpp, Lang::kPython),
                         paramName);

}  // namespace
}  // namespace kolo::elastic::testing
