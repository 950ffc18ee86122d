// kolorun with real processes on this machine: identity, output, exit codes,
// failure handling, signals, secrets and bad input.
#include <gtest/gtest.h>

#include "kolo/build_config.h"
#include <signal.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "launcher_test_util.h"

namespace kolo::launcher::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::vector<std::string> withProbe(std::vector<std::string> kolorunArgs,
                                   const std::vector<std::string>& probeArgs) {
  kolorunArgs.push_back(probePath());
  kolorunArgs.insert(kolorunArgs.end(), probeArgs.begin(), probeArgs.end());
  return kolorunArgs;
}

class LocalJob : public ::testing::TestWithParam<int> {};

TEST_P(LocalJob, EveryRankGetsItsIdentityAndTheJobsRendezvous) {
  const int np = GetParam();
  auto r = runKolorun(withProbe({"-np", std::to_string(np), "--cycle-time-ms", "4"}, {"env"}));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  auto env = envByRank(r.out);
  ASSERT_EQ(env.size(), static_cast<size_t>(np)) << r.out;
  std::set<std::string> pgids;
  for (int rank = 0; rank < np; ++rank) {
    auto& e = env[rank];
    EXPECT_EQ(e["KOLO_RANK"], std::to_string(rank));
    EXPECT_EQ(e["KOLO_SIZE"], std::to_string(np));
    EXPECT_EQ(e["KOLO_LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(e["KOLO_LOCAL_SIZE"], std::to_string(np));
    EXPECT_EQ(e["KOLO_CROSS_RANK"], "0");
    EXPECT_EQ(e["KOLO_CROSS_SIZE"], "1");
    EXPECT_EQ(e["KOLO_HOSTNAME"], "localhost");
    EXPECT_EQ(e["KOLO_RENDEZVOUS_ADDR"], "127.0.0.1");
    EXPECT_EQ(e["KOLO_RENDEZVOUS_PORT"], env[0]["KOLO_RENDEZVOUS_PORT"]);
    EXPECT_EQ(e["KOLO_SECRET_KEY"], env[0]["KOLO_SECRET_KEY"]);
    EXPECT_EQ(e["KOLO_SECRET_KEY"].size(), 64u);
    EXPECT_EQ(e["KOLO_CYCLE_TIME"], "4");
    EXPECT_EQ(e["PID"], e["PGID"]) << "each worker leads its own process group";
    pgids.insert(e["PGID"]);
  }
  EXPECT_EQ(pgids.size(), static_cast<size_t>(np));
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalJob, ::testing::Values(1, 2, 3, 4));

TEST(LocalJobs, EachJobGetsAFreshSecret) {
  auto a = envByRank(runKolorun(withProbe({"-np", "1"}, {"env"})).out);
  auto b = envByRank(runKolorun(withProbe({"-np", "1"}, {"env"})).out);
  EXPECT_NE(a[0]["KOLO_SECRET_KEY"], b[0]["KOLO_SECRET_KEY"]);
}

TEST(LocalJobs, OutputIsPrefixedPerStreamAndPartialLastLinesAreKept) {
  auto r = runKolorun(withProbe({"-np", "2"}, {"out", "hello", "err", "oops", "partial", "tail"}));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::string p = "[" + std::to_string(rank) + "]";
    EXPECT_NE(r.out.find(p + "<stdout>:hello\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(p + "<stdout>:tail\n"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find(p + "<stderr>:oops\n"), std::string::npos) << r.err;
  }
}

TEST(LocalJobs, TimestampPrefix) {
  auto r = runKolorun(withProbe({"-np", "1", "--prefix-timestamp"}, {"out", "x"}));
  ASSERT_EQ(r.exitCode, 0);
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \[0\]<stdout>:x\n)")))
      << r.out;
}

TEST(LocalJobs, LinesNeverInterleaveUnderLoad) {
  const int kLines = 20000;
  auto r = runKolorun(withProbe({"-np", "2"}, {"lines", std::to_string(kLines)}));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  std::regex good(R"(^\[(\d)\]<stdout>:r(\d) line (\d+) abcdefghijklmnopqrstuvwxyz0123456789 end$)");
  std::vector<long> next(2, 0);
  size_t count = 0;
  for (const auto& l : splitLines(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, good)) << "damaged line: " << l;
    int rank = std::stoi(m[1]);
    ASSERT_EQ(m[2], m[1]);
    ASSERT_EQ(std::stol(m[3]), next[rank]) << "lost or reordered line of rank " << rank;
    ++next[rank];
    ++count;
  }
  EXPECT_EQ(count, 2u * kLines);
}

TEST(LocalJobs, OutputFilesHoldEachRanksStreams) {
  std::string dir = "/tmp/" + uniqueToken("outdir");
  auto r = runKolorun(
      withProbe({"-np", "2", "--output-filename", dir + "/logs"}, {"out", "a", "err", "b", "partial", "c"}));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream out(dir + "/logs/rank." + std::to_string(rank) + "/stdout");
    std::ifstream err(dir + "/logs/rank." + std::to_string(rank) + "/stderr");
    std::string o((std::istreambuf_iterator<char>(out)), {});
    std::string e((std::istreambuf_iterator<char>(err)), {});
    EXPECT_EQ(o, "a\nc");
    EXPECT_EQ(e, "b\n");
  }
  std::system(("rm -rf " + dir).c_str());
}

TEST(LocalJobs, ExitCodeOfTheFailedRankPropagatesAndNamesIt) {
  auto r = runKolorun(withProbe({"-np", "4"}, {"exit-if-rank", "2", "3", "sleep", "30"}),
                      seconds(60));
  EXPECT_EQ(r.exitCode, 3);
  EXPECT_EQ(lastLine(r.err),
            "kolorun: rank 2 (host localhost) exited with code 3; stopped the other 3 ranks");
  EXPECT_LT(r.seconds, 5.0) << "stopping the others must not wait for them";
}

TEST(LocalJobs, RankKilledBySignalIsReportedAs128PlusN) {
  auto r = runKolorun(withProbe({"-np", "2"}, {"sleep-if-rank", "0", "30", "kill-self", "9"}));
  EXPECT_EQ(r.exitCode, 128 + SIGKILL);
  EXPECT_NE(lastLine(r.err).find("rank 1 (host localhost) was killed by SIGKILL"),
            std::string::npos)
      << r.err;
}

TEST(LocalJobs, FailureStopsTheOthersWithinTheGracePeriodEvenIfTheyIgnoreTerm) {
  std::string token = uniqueToken("grace");
  auto r = runKolorun(withProbe({"-np", "3", "--grace-seconds", "1"},
                                {"tag", token, "ignore-term", "sleep-if-rank", "1", "0.5",
                                 "exit-if-rank", "1", "7", "sleep", "60"}));
  EXPECT_EQ(r.exitCode, 7);
  EXPECT_LT(r.seconds, 4.0);
  EXPECT_GT(r.seconds, 1.4) << "SIGKILL came before the grace period";
  EXPECT_TRUE(waitForNoProcessesWith(token, milliseconds(500)).empty());
}

TEST(LocalJobs, SigtermToKolorunStopsEveryRankAndLeavesNoOrphans) {
  std::string token = uniqueToken("sigterm");
  Running run(withProbe({kolorunPath(), "-np", "4"},
                        {"tag", token, "spawn-child", "60", "out", "ready", "sleep", "60"}));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(run.waitForOutput("[" + std::to_string(i) + "]<stdout>:ready", seconds(20)));
  EXPECT_EQ(processesWith(token).size(), 1u + 4 + 4);  // kolorun, workers, their children
  run.signal(SIGTERM);
  auto r = run.wait(seconds(20));
  EXPECT_EQ(r.exitCode, 128 + SIGTERM);
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_NE(lastLine(r.err).find("got SIGTERM; stopped 4 ranks"), std::string::npos) << r.err;
  EXPECT_TRUE(waitForNoProcessesWith(token, milliseconds(500)).empty());
}

TEST(LocalJobs, SigkillToKolorunStillTakesTheWorkersDown) {
  std::string token = uniqueToken("sigkill");
  Running run(withProbe({kolorunPath(), "-np", "2"}, {"tag", token, "out", "ready", "sleep", "60"}));
  ASSERT_TRUE(run.waitForOutput("[1]<stdout>:ready", seconds(20)));
  run.signal(SIGKILL);
  run.wait(seconds(10));
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(3)).empty());
}

TEST(LocalJobs, SecretNeverAppearsOnAnyCommandLine) {
  std::string token = uniqueToken("secret");
  Running run(withProbe({kolorunPath(), "-np", "2"}, {"tag", token, "env", "out", "ready", "sleep", "60"}));
  // Each rank prints its environment before "ready": wait for both.
  ASSERT_TRUE(run.waitForOutput("[0]<stdout>:ready", seconds(20)));
  ASSERT_TRUE(run.waitForOutput("[1]<stdout>:ready", seconds(20)));
  auto env = envByRank(run.out());
  std::string secret = env[0]["KOLO_SECRET_KEY"];
  ASSERT_EQ(secret.size(), 64u);
  EXPECT_EQ(processesWith(token).size(), 3u);
  EXPECT_TRUE(processesWith(secret).empty());
  run.signal(SIGINT);
  EXPECT_EQ(run.wait(seconds(20)).exitCode, 128 + SIGINT);
}

TEST(LocalJobs, ProgramsThatNeverCallInitStillFinish) {
  auto r = runKolorun({"--start-timeout", "1", "-np", "2", "/bin/true"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

// Many missing ranks are named in runs, on one line.
TEST(LocalJobs, StartTimeoutNamesManyMissingRanksInRuns) {
  std::string token = uniqueToken("arrive");
  auto r = runKolorun(withProbe({"-np", "12", "--start-timeout", "2"},
                                {"tag", token, "arrive-unless-rank", "1,2,3,4,5,6,7,8,9,11", "sleep",
                                 "60"}));
  EXPECT_EQ(r.exitCode, 124) << r.err;
  EXPECT_NE(lastLine(r.err).find("ranks 1-9,11 (host localhost) did not reach rendezvous within 2 s"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(waitForNoProcessesWith(token, std::chrono::seconds(10)).empty());
}

TEST(LocalJobs, StartTimeoutNamesTheRanksThatNeverArrived) {
  std::string token = uniqueToken("arrive");
  auto r = runKolorun(withProbe({"-np", "4", "--start-timeout", "2"},
                                {"tag", token, "arrive-unless-rank", "2", "sleep", "60"}));
  EXPECT_EQ(r.exitCode, 124) << r.err;
  EXPECT_NE(lastLine(r.err).find("rank 2 (host localhost) did not reach rendezvous within 2 s"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_EQ(splitLines(r.out).size(), 3u) << "three ranks arrived: " << r.out;
  EXPECT_TRUE(waitForNoProcessesWith(token, milliseconds(500)).empty());
}

// A rank that fails at start-up (its peers time out waiting for one that
// never came) is reported with the ranks that had not arrived, by host.
TEST(LocalJobs, AFailureAtStartUpNamesTheRanksThatHadNotArrived) {
  std::string token = uniqueToken("arrive");
  // After the exchange every rank but 2 and 3 has arrived (each arrives
  // before it exchanges).
  auto r = runKolorun(withProbe({"-np", "6"}, {"tag", token, "arrive-unless-rank", "2,3",
                                               "exchange", "exit-if-rank", "0", "5", "sleep",
                                               "60"}));
  EXPECT_EQ(r.exitCode, 5) << r.err;
  EXPECT_NE(lastLine(r.err).find("rank 0 (host localhost) exited with code 5; ranks 2,3 (host "
                                 "localhost) had not reached rendezvous"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(waitForNoProcessesWith(token, std::chrono::seconds(10)).empty());
}

// A program that never rendezvouses is not said to be waiting for anyone.
TEST(LocalJobs, AFailureOfAProgramWithoutKoloNamesNoMissingRanks) {
  auto r = runKolorun(withProbe({"-np", "3"}, {"exit-if-rank", "1", "4", "sleep", "60"}));
  EXPECT_EQ(r.exitCode, 4) << r.err;
  EXPECT_EQ(lastLine(r.err).find("rendezvous"), std::string::npos) << r.err;
}

TEST(LocalJobs, AStoreClientWithTheWrongSecretIsRefused) {
  auto r = runKolorun(withProbe({"-np", "1"}, {"wrong-secret", "arrive"}));
  EXPECT_EQ(r.exitCode, 0) << r.err;
  // Refused for its secret (not a timeout or a closed port); the right
  // secret still works afterwards.
  const std::string refused = "[0]<stdout>:WRONG_SECRET=refused (";
  size_t at = r.out.find(refused);
  ASSERT_NE(at, std::string::npos) << r.out;
  std::string why = r.out.substr(at + refused.size(), r.out.find('\n', at) - at - refused.size());
  EXPECT_NE(why.find("secret"), std::string::npos) << why;
  EXPECT_NE(r.out.find("[0]<stdout>:ARRIVED 0"), std::string::npos) << r.out;
}

// Bad input: one line, exit 2, nothing started.
void expectUsageError(const std::vector<std::string>& args, const std::string& fragment) {
  std::string token = uniqueToken("bad");
  std::vector<std::string> full = args;
  full.push_back(token);
  auto r = runKolorun(full, seconds(20));
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_EQ(splitLines(r.err).size(), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("kolorun: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(fragment), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(processesWith(token).empty());
}

TEST(BadInput, OneLineExitTwoNothingStarted) {
  std::string probe = probePath();
  expectUsageError({"-np", "2", "-H", "localhost:x", probe, "tag"}, "positive integer");
  expectUsageError({"-np", "5", "-H", "localhost:2,127.0.0.2:2", probe, "tag"}, "lower -np");
  expectUsageError({"-np", "2", "--hostfile", "/nonexistent/hosts", probe, "tag"}, "hostfile");
  expectUsageError({"-np", "2", "kolo-no-such-program", "tag"}, "not found");
  if (!KOLO_WITH_MPI) {
    expectUsageError({"-np", "2", "--mpi", probe, "tag"}, "--mpi is not available in this build yet");
  }
  expectUsageError({"-np", "2", "--frobnicate", probe, "tag"}, "--help");
  expectUsageError({"-np", "2", "--output-filename", "/proc/kolo-nope", probe, "tag"},
                   "--output-filename");
  expectUsageError({"-np", "2", "-H", "10.77.255.250:2", "--network-interface", "kolo-nonexistent0",
                    probe, "tag"},
                   "no such interface");
  expectUsageError({"-np", "2", "-H", "10.77.255.250:2", "--network-interfaces",
                    "kolo-nonexistent0,kolo-nonexistent1", probe, "tag"},
                   "none of these interfaces has an IPv4 address on this host; interfaces here:");
}

TEST(BadInput, HostfileSyntaxErrorNamesTheLine) {
  std::string path = "/tmp/" + uniqueToken("hostfile");
  std::ofstream(path) << "# hosts\nlocalhost slots=2\nlocalhost2 slots=\n";
  expectUsageError({"--hostfile", path, probePath(), "tag"}, path + ":3:");
  unlink(path.c_str());
}

TEST(BadInput, PortInUse) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  expectUsageError({"-np", "1", "--port", std::to_string(ntohs(addr.sin_port)), probePath(), "tag"},
                   "choose another --port");
  close(fd);
}

TEST(LocalJobs, HelpDocumentsEveryFlag) {
  auto r = runKolorun({"--help"});
  EXPECT_EQ(r.exitCode, 0);
  for (const char* flag :
       {"-np", "--hosts", "--hostfile", "--gloo", "--mpi", "--network-interface", "--port",
        "--start-timeout", "--grace-seconds", "--env", "--rsh", "--ssh-port", "--ssh-identity-file",
        "--output-filename", "--prefix-timestamp", "--verbose", "--fusion-threshold-mb",
        "--cycle-time-ms", "--cache-capacity", "--timeline-filename", "--autotune",
        "--autotune-log-file", "--log-level", "--stall-check-warning-time-seconds",
        "--stall-check-shutdown-time-seconds", "--timeout-seconds", "--version",
        // horovodrun 0.28.1's other flags
        "--check-build", "-cb", "--config-file", "--disable-cache", "--jsrun",
        "--network-interfaces", "--hierarchical-allreduce", "--no-hierarchical-allreduce",
        "--hierarchical-allgather", "--no-hierarchical-allgather", "--torus-allreduce",
        "--no-torus-allreduce", "--no-autotune", "--autotune-warmup-samples",
        "--autotune-steps-per-sample", "--autotune-bayes-opt-max-samples",
        "--autotune-gaussian-process-noise", "--timeline-mark-cycles", "--no-stall-check",
        "--stall-check", "--mpi-threads-disable", "--mpi-args", "--tcp", "--binding-args",
        "--num-nccl-streams", "--thread-affinity", "--gloo-timeout-seconds", "--log-with-timestamp",
        "--log-without-timestamp", "--log-hide-timestamp", "--prefix-output-with-timestamp",
        "-prefix-timestamp", "-hostfile", "--min-np", "--max-np", "--slots-per-host",
        "--elastic-timeout", "--reset-limit", "--blacklist-cooldown-range",
        "--host-discovery-script", "--ssh-port", "--ssh-identity-file", "-v,"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace kolo::launcher::testing
