// Remote start through --rsh, with a remote shell that runs on this machine
// (tests/launcher/fake-rsh.sh): the stdin script, the started marker, the
// watchdog that stops the program when kolorun goes away, start failures.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <regex>

#include "launcher_test_util.h"

namespace kolo::launcher::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string fakeRsh() { return std::string(sourceDir()) + "/tests/launcher/fake-rsh.sh"; }

std::vector<std::string> remoteJob(const std::string& hosts, std::vector<std::string> extra,
                                   const std::vector<std::string>& probeArgs) {
  std::vector<std::string> args = {"-H", hosts, "--rsh", fakeRsh(), "--network-interface", "lo"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back(probePath());
  args.insert(args.end(), probeArgs.begin(), probeArgs.end());
  return args;
}

TEST(RemoteJob, RanksGetTheirIdentityThroughTheRemoteShellsStdin) {
  auto r = runKolorun(remoteJob("hostA:2,hostB:2", {"-x", "KOLO_TEST_EXTRA=yes"}, {"env", "exchange"}));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out.find("kolorun-remote-started"), std::string::npos) << "marker must be swallowed";
  auto env = envByRank(r.out);
  ASSERT_EQ(env.size(), 4u) << r.out;
  const char* hosts[] = {"hostA", "hostA", "hostB", "hostB"};
  for (int rank = 0; rank < 4; ++rank) {
    auto& e = env[rank];
    EXPECT_EQ(e["KOLO_RANK"], std::to_string(rank));
    EXPECT_EQ(e["KOLO_SIZE"], "4");
    EXPECT_EQ(e["KOLO_HOSTNAME"], hosts[rank]);
    EXPECT_EQ(e["KOLO_LOCAL_RANK"], std::to_string(rank % 2));
    EXPECT_EQ(e["KOLO_CROSS_RANK"], std::to_string(rank / 2));
    EXPECT_EQ(e["KOLO_CROSS_SIZE"], "2");
    EXPECT_EQ(e["KOLO_RENDEZVOUS_ADDR"], "127.0.0.1");
    EXPECT_EQ(e["KOLO_IFACE"], "lo");
    EXPECT_EQ(e["KOLO_TEST_EXTRA"], "yes");
    EXPECT_EQ(e["KOLO_SECRET_KEY"].size(), 64u);
    EXPECT_EQ(e["PID"], e["PGID"]) << "the remote program runs in its own session";
  }
  EXPECT_NE(r.out.find("EXCHANGE_OK hostA/0 hostA/1 hostB/2 hostB/3"), std::string::npos) << r.out;
}

TEST(RemoteJob, ExitCodePropagatesAndTheOthersAreStopped) {
  std::string token = uniqueToken("rfail");
  auto r = runKolorun(remoteJob("hostA:2,hostB:2", {"--grace-seconds", "1"},
                                {"tag", token, "exit-if-rank", "3", "5", "sleep", "60"}));
  EXPECT_EQ(r.exitCode, 5) << r.err;
  EXPECT_EQ(lastLine(r.err),
            "kolorun: rank 3 (host hostB) exited with code 5; stopped the other 3 ranks");
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(2)).empty());
}

TEST(RemoteJob, RemoteProgramsThatIgnoreTermAreKilledAfterTheGrace) {
  std::string token = uniqueToken("rgrace");
  auto r = runKolorun(remoteJob("hostA:1,hostB:1", {"--grace-seconds", "1"},
                                {"tag", token, "ignore-term", "exit-if-rank", "0", "4", "sleep", "60"}));
  EXPECT_EQ(r.exitCode, 4) << r.err;
  EXPECT_LT(r.seconds, 6.0);
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(2)).empty());
}

TEST(RemoteJob, SigtermAndSigkillToKolorunLeaveNoRemoteOrphans) {
  for (int sig : {SIGTERM, SIGKILL}) {
    std::string token = uniqueToken("rsig");
    std::vector<std::string> argv = {kolorunPath()};
    auto args = remoteJob("hostA:2,hostB:1", {}, {"tag", token, "env", "spawn-child", "60", "out", "ready", "sleep", "60"});
    argv.insert(argv.end(), args.begin(), args.end());
    Running run(argv);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(run.waitForOutput("[" + std::to_string(i) + "]<stdout>:ready", seconds(20)));
    }
    std::string secret = envByRank(run.out())[0]["KOLO_SECRET_KEY"];
    ASSERT_EQ(secret.size(), 64u);
    EXPECT_TRUE(processesWith(secret).empty()) << "secret on a remote command line";
    run.signal(sig);
    auto r = run.wait(seconds(20));
    if (sig == SIGTERM) EXPECT_EQ(r.exitCode, 128 + SIGTERM) << r.err;
    // SIGKILL: the remote shells lose their stdin and their watchdogs stop
    // the programs.
    EXPECT_TRUE(waitForNoProcessesWith(token, seconds(sig == SIGKILL ? 8 : 3)).empty())
        << "signal " << sig;
  }
}

TEST(RemoteJob, UnreachableHostIsAStartErrorAndStopsTheRest) {
  std::string token = uniqueToken("unreach");
  auto r = runKolorun(remoteJob("hostA:1,unreachable-b:1", {"--grace-seconds", "1"},
                                {"tag", token, "sleep", "60"}));
  EXPECT_EQ(r.exitCode, 2) << r.err;
  std::string line = lastLine(r.err);
  EXPECT_NE(line.find("could not start rank 1 (host unreachable-b)"), std::string::npos) << line;
  EXPECT_NE(line.find("No route to host"), std::string::npos) << line;
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(3)).empty());
}

TEST(RemoteJob, MissingProgramOnTheRemoteHost) {
  auto r = runKolorun({"-H", "hostA:1", "--rsh", fakeRsh(), "--network-interface", "lo",
                       "kolo-no-such-program-xyz"});
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(lastLine(r.err).find("not found on host"), std::string::npos) << r.err;
}

TEST(RemoteJob, StartTimeoutCoversRemoteRanks) {
  auto r = runKolorun(remoteJob("hostA:1,hostB:2", {"--start-timeout", "2", "--grace-seconds", "1"},
                                {"arrive-unless-rank", "1,2", "sleep", "60"}));
  EXPECT_EQ(r.exitCode, 124) << r.err;
  EXPECT_NE(lastLine(r.err).find("ranks 1,2 (host hostB) did not reach rendezvous within 2 s"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace kolo::launcher::testing
