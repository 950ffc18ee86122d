// Elastic jobs on this machine, in C++ (kolo::elastic) and Python
// (kolo.torch.elastic): a killed worker, a hung worker, survivors below
// --min-np, a host that keeps failing, and ten random kills and host
// changes in one run. Real processes under kolorun; every wait is bounded
// and every case checks that no process is left behind.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "elastic_test_util.h"

namespace kolo::elastic::testing {
namespace {

using launcher::testing::uniqueToken;
using launcher::testing::waitForNoProcessesWith;

class ElasticJob : public ::testing::TestWithParam<Lang> {
 protected:
  void SetUp() override {
    if (GetParam() == Lang::kPython && !havePython()) {
      GTEST_SKIP() << "the kolo Python package is not built (no interpreter with torch)";
    }
  }
  Lang lang() const { return GetParam(); }
  // Python workers start slower (the interpreter and torch import).
  milliseconds startBound() const { return lang() == Lang::kCpp ? seconds(40) : seconds(60); }
};

std::string paramName(const ::testing::TestParamInfo<Lang>& info) { return langName(info.param); }

// What the driver decides (hangs, --min-np, blacklisting) does not depend
// on the worker's language: these run the C++ worker. The Python worker's
// side of a reset is the same as for a killed worker (ElasticJob.*/python).
class ElasticDriver : public ::testing::Test {
 protected:
  Lang lang() const { return Lang::kCpp; }
  milliseconds startBound() const { return seconds(40); }
};

// SIGKILL one of 4 workers mid-training: the 3 survivors continue from the
// last commit and finish with identical parameters.
TEST_P(ElasticJob, KillOneOfFourWorkersTheOthersContinueWithThree) {
  const std::string token = uniqueToken("ekill");
  ElasticRun run(lang(),
                 {"-np", "4", "--min-np", "2", "-H", "localhost:4", "--timeout-seconds", "10",
                  "--grace-seconds", "2"},
                 {"--epochs", "2", "--samples", "512", "--batch", "8", "--commit-every", "4"},
                 token);
  ASSERT_TRUE(run.waitForStep(1, 0, 6, startBound())) << run.running().err();
  const int64_t killedAt = run.signalWorker(2, SIGKILL);
  ASSERT_TRUE(run.waitForWorld(2, seconds(30))) << run.running().err();
  auto r = run.finish(seconds(60));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  auto log = ElasticLog::parse(r.out, r.err);
  EXPECT_EQ(log.worldSize.at(2), 3);
  EXPECT_EQ(log.workersOf(2), (std::vector<int64_t>{0, 1, 3}));
  // The survivors' engines named the lost rank with what kolorun saw.
  EXPECT_NE(r.err.find("rank 2 failed: worker 2 on host localhost was killed by SIGKILL"),
            std::string::npos)
      << r.err;
  const int64_t recovery = log.firstStepTime(2) - killedAt;
  report(std::string(langName(lang())) + " local kill: SIGKILL to the first step of world 2: " +
         std::to_string(recovery) + " ms");
  EXPECT_LT(recovery, 3000);
  expectTrainedConsistently(log, 2, 512);
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(5)).empty());
}

// Process sets across a reset (Python, as Horovod scripts use them): the
// static set given to init() is rebuilt with its id in the new world, a
// dynamic set ends with the old world (its ProcessSet is invalidated) and is
// added again in the reset callback.
TEST(ElasticProcessSets, StaticSetsAreRebuiltDynamicOnesEndWithTheWorld) {
  if (!havePython()) GTEST_SKIP() << "the kolo Python package is not built";
  const std::string token = uniqueToken("epsets");
  ElasticRun run(Lang::kPython,
                 {"-np", "4", "--min-np", "2", "-H", "localhost:4", "--timeout-seconds", "10",
                  "--grace-seconds", "2"},
                 {"--epochs", "2", "--samples", "512", "--batch", "8", "--commit-every", "4",
                  "--process-sets"},
                 token);
  ASSERT_TRUE(run.waitForStep(1, 0, 6, seconds(60))) << run.running().err();
  run.signalWorker(3, SIGKILL);
  ASSERT_TRUE(run.waitForWorld(2, seconds(30))) << run.running().err();
  auto r = run.finish(seconds(60));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  // Survivors: static set 1 still there, dynamic set 2 invalidated.
  EXPECT_NE(r.out.find("PSETS worker=0 static_id=1 dynamic_id=None"), std::string::npos) << r.out;
  // Ranks 0 and 1 of world 2 reduce over the rebuilt static set.
  EXPECT_NE(r.out.find("PSET v=2 rank=0 static_sum=2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PSET v=2 rank=1 static_sum=2"), std::string::npos) << r.out;
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(5)).empty());
}

// A worker that stops answering (SIGSTOP) is found by its peers within
// KOLO_TIMEOUT, killed by kolorun after KOLO_TIMEOUT more, and the world is
// rebuilt without it.
TEST_F(ElasticDriver, HungWorkerIsKilledAndTheWorldRebuilt) {
  const std::string token = uniqueToken("ehang");
  ElasticRun run(lang(),
                 {"-np", "3", "--min-np", "2", "-H", "localhost:3", "--timeout-seconds", "1.5",
                  "--grace-seconds", "1"},
                 {"--epochs", "2", "--samples", "384", "--batch", "8", "--commit-every", "4"},
                 token);
  ASSERT_TRUE(run.waitForStep(1, 0, 4, startBound())) << run.running().err();
  const int64_t stoppedAt = run.signalWorker(1, SIGSTOP);
  ASSERT_TRUE(run.waitForWorld(2, seconds(30))) << run.running().err();
  auto r = run.finish(seconds(60));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  auto log = ElasticLog::parse(r.out, r.err);
  EXPECT_EQ(log.workersOf(2), (std::vector<int64_t>{0, 2}));
  EXPECT_NE(r.err.find("kolorun: worker 1 (rank 1 of world 1, host localhost) did not leave "
                       "world 1 within 1.5 s (KOLO_TIMEOUT) after it broke: hung; killed it"),
            std::string::npos)
      << r.err;
  report("hung worker: SIGSTOP to the first step of world 2: " +
         std::to_string(log.firstStepTime(2) - stoppedAt) + " ms (KOLO_TIMEOUT 1.5 s)");
  expectTrainedConsistently(log, 2, 384);
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(5)).empty());
}

// Below --min-np for --elastic-timeout: one line saying what kolorun waited
// for, exit 124, nothing left running (horovod#3494 deadlocks here).
TEST_F(ElasticDriver, BelowMinNpTheJobEndsAfterTheElasticTimeout) {
  const std::string token = uniqueToken("emin");
  ElasticRun run(lang(),
                 {"-np", "3", "--min-np", "3", "-H", "localhost:3", "--elastic-timeout", "2",
                  "--timeout-seconds", "10", "--grace-seconds", "1"},
                 {"--epochs", "50", "--samples", "384"}, token);
  ASSERT_TRUE(run.waitForStep(1, 0, 4, startBound())) << run.running().err();
  const int64_t killedAt = run.signalWorker(1, SIGKILL);
  auto r = run.finish(seconds(30));
  const double took = (realtimeMs() - killedAt) / 1000.0;
  EXPECT_EQ(r.exitCode, 124) << r.err;
  EXPECT_FALSE(r.timedOut);
  std::string last = launcher::testing::lastLine(r.err);
  EXPECT_NE(last.find("kolorun: waited 2 s (--elastic-timeout) for at least 3 ready workers "
                      "(--min-np 3) but had 2"),
            std::string::npos)
      << r.err;
  EXPECT_NE(last.find("hosts: localhost:3 (blacklisted after 1 failure); stopped the job"),
            std::string::npos)
      << last;
  report("below --min-np: kolorun exited " + std::to_string(took) + " s after the kill");
  EXPECT_LT(took, 2 + 8.0);
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(5)).empty());
}

// Workers on one host keep crashing: each crash blacklists it for a
// doubling cool-down; the job goes on with the other host and finishes.
TEST_F(ElasticDriver, HostThatKeepsFailingIsBlacklistedAndTheJobGoesOn) {
  const std::string token = uniqueToken("ebad");
  Scratch dir;
  const std::string stop = dir.path() + "/stop";
  // Two names of this machine are two hosts to kolorun; workers on
  // 127.0.0.1 exit with code 3 at their first step in any world.
  ElasticRun run(lang(),
                 {"-np", "2", "--min-np", "2", "--max-np", "4", "-H", "localhost:2,127.0.0.1:2",
                  "--blacklist-cooldown-range", "0.3", "0.6", "--timeout-seconds", "10",
                  "--grace-seconds", "1"},
                 {"--epochs", "1000", "--samples", "256", "--crash-on-host", "127.0.0.1",
                  "--crash-after-steps", "1", "--stop-file", stop},
                 token);
  auto failures = [](const std::string& err) {
    size_t n = 0;
    for (size_t at = err.find("host 127.0.0.1 takes no new workers"); at != std::string::npos;
         at = err.find("host 127.0.0.1 takes no new workers", at + 1)) {
      ++n;
    }
    return n;
  };
  ASSERT_TRUE(run.running().waitUntil(
      [&](const std::string&) { return failures(run.running().err()) >= 4; }, seconds(60)))
      << run.running().err();
  std::ofstream(stop) << "stop\n";
  auto r = run.finish(seconds(60));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  auto log = ElasticLog::parse(r.out, r.err);
  EXPECT_NE(r.err.find("host 127.0.0.1 takes no new workers for 0.3 s (failure 1)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("host 127.0.0.1 takes no new workers for 0.6 s (failure 3)"),
            std::string::npos)
      << r.err;
  // Worlds without the failing host kept training.
  for (const auto& d : log.done) EXPECT_EQ(log.hostOf.at(d.worker), "localhost");
  expectTrainedConsistently(log, static_cast<int>(log.done.front().epochs), 256);
  report("failing host: " + std::to_string(failures(r.err)) + " failures, " +
         std::to_string(log.lastWorld()) + " worlds");
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(5)).empty());
}

// Ten random events in one run: kill a random member (while more than
// --min-np remain), list a second host, unlist it again. Training ends with
// every rank identical and every sample of every epoch processed once
// (twice only as the epoch's last-step padding).
TEST_P(ElasticJob, TenRandomKillsAndHostChanges) {
  const std::string token = uniqueToken("erand");
  Scratch dir;
  HostsFile hosts(dir.path());
  hosts.set("localhost:2\n");
  const std::string stop = dir.path() + "/stop";
  ElasticRun run(lang(),
                 {"-np", "2", "--min-np", "2", "--max-np", "4", "--host-discovery-script",
                  hosts.script(), "--discovery-interval", "0.2", "--blacklist-cooldown-range",
                  "0.5", "1", "--timeout-seconds", "10", "--grace-seconds", "1"},
                 {"--epochs", "1000", "--samples", "256", "--batch", "8", "--commit-every", "2",
                  "--stop-file", stop},
                 token);
  ASSERT_TRUE(run.waitForStep(1, 0, 2, startBound())) << run.running().err();
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  report(std::string(langName(lang())) + " random events: seed " + std::to_string(seed));
  bool second = false;  // 127.0.0.1 listed
  std::string events;
  auto newWorldAfter = [&](int64_t world) {
    return run.running().waitUntil(
        [&](const std::string&) {
          return ElasticLog::parse("", run.running().err()).lastWorld() > world;
        },
        seconds(60));
  };
  for (int i = 0; i < 10; ++i) {
    // Let the newest world train a little first.
    auto log = ElasticLog::parse(run.running().out(), run.running().err());
    const int64_t world = log.lastWorld();
    ASSERT_TRUE(run.waitForWorld(world, seconds(60))) << "event " << i << "\n"
                                                       << run.running().err();
    log = ElasticLog::parse(run.running().out(), run.running().err());
    std::vector<int64_t> members = log.workersOf(world);
    size_t onSecond = 0;
    for (int64_t w : members) onSecond += log.hostOf[w] == "127.0.0.1" ? 1 : 0;
    std::vector<std::string> allowed;
    if (members.size() > 2) allowed.push_back("kill");
    if (!second) allowed.push_back("add");
    if (second && members.size() - onSecond >= 2 && onSecond > 0) allowed.push_back("remove");
    if (allowed.empty()) {
      // Two members, the second host listed but its workers still starting:
      // they join next.
      ASSERT_TRUE(newWorldAfter(world)) << run.running().err();
      --i;
      continue;
    }
    const std::string event = allowed[rng() % allowed.size()];
    if (event == "kill") {
      int64_t victim = members[rng() % members.size()];
      run.signalWorker(victim, SIGKILL);
      events += " kill:" + std::to_string(victim);
    } else if (event == "add") {
      hosts.set("localhost:2\n127.0.0.1:2\n");
      second = true;
      events += " add";
    } else {
      hosts.set("localhost:2\n");
      second = false;
      events += " remove";
    }
    // Every event re-forms the world.
    ASSERT_TRUE(newWorldAfter(world))
        << "no new world after event " << i << " (" << event << ")\n"
        << run.running().err();
  }
  report(std::string(langName(lang())) + " random events:" + events);
  auto log = ElasticLog::parse(run.running().out(), run.running().err());
  ASSERT_TRUE(run.waitForWorld(log.lastWorld(), seconds(60))) << run.running().err();
  std::ofstream(stop) << "stop\n";
  auto r = run.finish(seconds(90));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  log = ElasticLog::parse(r.out, r.err);
  EXPECT_GE(log.lastWorld(), 11);
  expectTrainedConsistently(log, static_cast<int>(log.done.front().epochs), 256);
  report(std::string(langName(lang())) + " random events: " + std::to_string(log.lastWorld()) +
         " worlds, " + std::to_string(log.done.front().epochs) + " epochs");
  EXPECT_TRUE(waitForNoProcessesWith(token, seconds(5)).empty());
}

// Bad input: one line naming the fix, exit 2, nothing started.
TEST(ElasticBadInput, OneLineExitTwoNothingStarted) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"-np", "2", "--host-discovery-script", "echo no hosts here >&2; exit 3", "true"},
       "kolorun: --host-discovery-script 'echo no hosts here >&2; exit 3' exited with code 3: "
       "no hosts here (the first discovery must succeed)"},
      {{"-np", "2", "--host-discovery-script", "echo a:b", "true"},
       "kolorun: --host-discovery-script 'echo a:b', line 1: slots of 'a' must be a positive "
       "integer, got 'b' (the first discovery must succeed)"},
      {{"-np", "5", "--min-np", "2", "-H", "localhost:4", "true"},
       "kolorun: -np 5 needs more slots than the hosts have (4: localhost:4); add hosts or "
       "slots, or lower -np"},
      {{"-np", "2", "--min-np", "3", "-H", "localhost:4", "true"},
       "kolorun: elastic sizes must satisfy --min-np <= -np <= --max-np, got 3 <= 2 <= 3"},
      {{"-np", "2", "--min-np", "1", "-H", "localhost:2", "--blacklist-cooldown-range", "5", "1",
        "true"},
       "kolorun: --blacklist-cooldown-range takes MIN MAX seconds with 0 < MIN <= MAX"},
      {{"--min-np", "1", "--mpi", "-H", "localhost:2", "true"},
       "kolorun: elastic jobs (--host-discovery-script, --min-np, --max-np) run over Gloo; drop "
       "--mpi"},
  };
  for (const auto& c : cases) {
    auto r = launcher::testing::runKolorun(c.args, seconds(30));
    EXPECT_EQ(r.exitCode, 2) << r.err;
    EXPECT_EQ(launcher::testing::lastLine(r.err), c.message);
    EXPECT_EQ(launcher::testing::splitLines(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

INSTANTIATE_TEST_SUITE_P(Lang, ElasticJob, ::testing::Values(Lang::kCpp, Lang::kPython), paramName);

}  // namespace
}  // namespace kolo::elastic::testing
