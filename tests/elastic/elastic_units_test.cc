// The elastic driver's pure parts (world planning, host set and blacklist,
// discovery output) and the worker side's world record and sampler, without
// processes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <map>
#include <set>

#include "host_set.h"
#include "hosts.h"
#include "kolo/elastic.h"
#include "kolo/elastic_world.h"
#include "kolo/error.h"
#include "options.h"
#include "usage_error.h"
#include "world_plan.h"

namespace kolo::launcher {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::vector<int64_t> workersInRankOrder(const std::vector<PlannedMember>& plan) {
  std::vector<int64_t> out;
  for (const auto& m : plan) out.push_back(m.worker);
  return out;
}

TEST(WorldPlan, SurvivorsKeepTheLowestRanksAndRankZeroIsTheOldestSurvivor) {
  // World 1 was: a: workers 0 (rank 0), 1 (rank 1); b: 2 (rank 2), 3 (rank 3).
  // Worker 0 died; worker 4 is new on c; worker 5 is new on b.
  std::vector<WorldCandidate> c = {
      {4, "c", 0, -1}, {3, "b", 1, 3}, {1, "a", 1, 1}, {2, "b", 0, 2}, {5, "b", 2, -1}};
  auto plan = planWorld(c, {"a", "b", "c"}, 8);
  EXPECT_EQ(workersInRankOrder(plan), (std::vector<int64_t>{1, 2, 3, 5, 4}));
  EXPECT_EQ(plan[0].placement.rank, 0);
  EXPECT_EQ(plan[0].placement.host, "a");
  EXPECT_EQ(plan[0].placement.localSize, 1);
  // b holds ranks 1-3, contiguous, with survivors first.
  for (int r = 1; r <= 3; ++r) {
    EXPECT_EQ(plan[r].placement.host, "b");
    EXPECT_EQ(plan[r].placement.localRank, r - 1);
    EXPECT_EQ(plan[r].placement.localSize, 3);
    // Local rank 0 is on a, b and c; local ranks 1 and 2 only on b.
    EXPECT_EQ(plan[r].placement.crossRank, r == 1 ? 1 : 0);
  }
  EXPECT_EQ(plan[4].placement.host, "c");
  for (const auto& m : plan) EXPECT_EQ(m.placement.size, 5);
  // local rank 0 exists on a, b and c; local rank 1 only on b.
  EXPECT_EQ(plan[0].placement.crossSize, 3);
  EXPECT_EQ(plan[2].placement.crossSize, 1);
}

TEST(WorldPlan, CrossRankCountsOnlyHostsWithThatLocalRank) {
  // a has one rank, b two: b's local rank 1 is the only one of its kind.
  auto plan = planWorld({{0, "a", 0, 0}, {1, "b", 0, 1}, {2, "b", 1, 2}}, {"a", "b"}, 4);
  EXPECT_EQ(plan[2].placement.localRank, 1);
  EXPECT_EQ(plan[2].placement.crossRank, 0);
  EXPECT_EQ(plan[2].placement.crossSize, 1);
  EXPECT_EQ(plan[1].placement.crossRank, 1);
  EXPECT_EQ(plan[1].placement.crossSize, 2);
}

TEST(WorldPlan, HostsWithSurvivorsComeBeforeOlderHostsWithout) {
  // a lost all its workers; b's survivor was rank 2; a has a new worker.
  std::vector<WorldCandidate> c = {{7, "a", 0, -1}, {2, "b", 0, 2}};
  auto plan = planWorld(c, {"a", "b"}, 8);
  EXPECT_EQ(workersInRankOrder(plan), (std::vector<int64_t>{2, 7}));
}

TEST(WorldPlan, MaxNpDropsNewWorkersFirst) {
  std::vector<WorldCandidate> c = {{9, "a", 2, -1}, {0, "a", 0, 0}, {8, "b", 0, -1}, {1, "a", 1, 1}};
  auto plan = planWorld(c, {"a", "b"}, 3);
  EXPECT_EQ(workersInRankOrder(plan), (std::vector<int64_t>{0, 1, 9}));
}

TEST(WorldPlan, FirstWorldFillsHostsInDiscoveryOrderBySlot) {
  std::vector<WorldCandidate> c = {{3, "b", 1, -1}, {0, "a", 0, -1}, {2, "b", 0, -1}, {1, "a", 1, -1}};
  auto plan = planWorld(c, {"a", "b"}, 4);
  EXPECT_EQ(workersInRankOrder(plan), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(planWorld({}, {"a"}, 4).empty());
}

TEST(HostSetTest, UpdatesReportAddedAndRemovedHostsAndSlots) {
  HostSet hosts;
  auto c = hosts.update({{"a", 2}, {"b", 2}});
  EXPECT_EQ(c.added, (std::vector<std::string>{"a", "b"}));
  c = hosts.update({{"b", 4}, {"c", 1}});
  EXPECT_EQ(c.removed, (std::vector<std::string>{"a"}));
  EXPECT_EQ(c.added, (std::vector<std::string>{"b", "c"}));
  EXPECT_FALSE(hosts.listed("a"));
  EXPECT_EQ(hosts.slots("b"), 4);
  // First-seen order survives a host leaving and coming back.
  hosts.update({{"c", 1}, {"a", 1}});
  EXPECT_EQ(hosts.order(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_FALSE(hosts.update({{"c", 1}, {"a", 1}}).any());
}

TEST(HostSetTest, WithoutACooldownAFailedHostIsBlacklistedForGood) {
  HostSet hosts;
  hosts.update({{"a", 2}, {"b", 2}});
  auto t = HostSet::Clock::now();
  EXPECT_FALSE(hosts.recordFailure("b", t).has_value());
  EXPECT_TRUE(hosts.blacklisted("b", t + std::chrono::hours(100)));
  EXPECT_EQ(hosts.availableSlots(t), 2);
  EXPECT_NE(hosts.describe(t).find("b:2 (blacklisted after 1 failure)"), std::string::npos)
      << hosts.describe(t);
}

TEST(HostSetTest, CooldownDoublesPerFailureUpToTheMaximum) {
  HostSet hosts({1.0, 5.0});
  hosts.update({{"a", 1}});
  auto t = HostSet::Clock::now();
  EXPECT_EQ(*hosts.recordFailure("a", t), milliseconds(1000));
  EXPECT_TRUE(hosts.blacklisted("a", t + milliseconds(999)));
  EXPECT_FALSE(hosts.blacklisted("a", t + milliseconds(1000)));
  EXPECT_EQ(hosts.nextRecovery(t), t + milliseconds(1000));
  EXPECT_EQ(*hosts.recordFailure("a", t), milliseconds(2000));
  EXPECT_EQ(*hosts.recordFailure("a", t), milliseconds(4000));
  EXPECT_EQ(*hosts.recordFailure("a", t), milliseconds(5000));
  EXPECT_EQ(hosts.failures("a"), 4);
  EXPECT_TRUE(hosts.available("a", t + seconds(6)));
}

TEST(Discovery, ParsesHostsSlotsCommentsAndDefaultSlots) {
  auto hosts = parseDiscoveryOutput("# hosts\nnode1:4\n\n  node2  \n[fe80::1]:2\n", 3, "s.sh");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].host, "node1");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].host, "node2");
  EXPECT_EQ(hosts[1].slots, 3);
  EXPECT_EQ(hosts[2].host, "[fe80::1]");
  EXPECT_TRUE(parseDiscoveryOutput("", 1, "s.sh").empty());
}

TEST(Discovery, BadLinesNameTheScriptAndTheLine) {
  try {
    parseDiscoveryOutput("a:2\nb:x\n", 1, "./discover.sh");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--host-discovery-script './discover.sh', line 2: slots "
                                         "of 'b' must be a positive integer, got 'x'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parseDiscoveryOutput("a:2 b:2\n", 1, "s"), UsageError);
  EXPECT_THROW(parseDiscoveryOutput("a:2\na:3\n", 1, "s"), UsageError);
}

TEST(ElasticFlags, HorovodNamesAndDefaults) {
  const char* argv[] = {"kolorun", "-np", "4", "--min-np", "2", "--host-discovery-script",
                        "./d.sh", "--slots", "2", "--elastic-timeout", "5", "--reset-limit", "3",
                        "--blacklist-cooldown-range", "1", "10", "prog", "--min-np", "9"};
  auto parsed = parseCommandLine(static_cast<int>(std::size(argv)), argv);
  ASSERT_TRUE(parsed.options);
  const Options& o = *parsed.options;
  EXPECT_TRUE(o.elastic());
  EXPECT_EQ(o.np, 4);
  EXPECT_EQ(o.minNp, 2);
  EXPECT_EQ(o.maxNp, 4);  // defaults to -np
  EXPECT_EQ(o.slotsPerHost, 2);
  EXPECT_EQ(o.elasticTimeoutSeconds, 5);
  EXPECT_EQ(*o.resetLimit, 3);
  EXPECT_EQ(o.blacklistCooldownRange, (std::vector<double>{1, 10}));
  EXPECT_EQ(o.command, (std::vector<std::string>{"prog", "--min-np", "9"}));
}

TEST(ElasticFlags, InconsistentSizesAndMissingHostsAreUsageErrors) {
  auto parse = [](std::vector<const char*> args) {
    args.insert(args.begin(), "kolorun");
    return parseCommandLine(static_cast<int>(args.size()), args.data());
  };
  EXPECT_THROW(parse({"-np", "2", "--min-np", "3", "-H", "a:4", "p"}), UsageError);
  EXPECT_THROW(parse({"-np", "4", "--max-np", "3", "-H", "a:4", "p"}), UsageError);
  EXPECT_THROW(parse({"--min-np", "2", "p"}), UsageError);  // no hosts
  EXPECT_THROW(parse({"-np", "2", "--min-np", "1", "-H", "a:2", "--blacklist-cooldown-range",
                      "5", "1", "p"}),
               UsageError);
  EXPECT_THROW(parse({"-np", "2", "--host-discovery-script", "d", "-H", "a:2", "p"}), UsageError);
}

}  // namespace
}  // namespace kolo::launcher

namespace kolo::elastic {
namespace {

TEST(WorldRecord, EncodesAndDecodes) {
  World w;
  w.version = 7;
  w.notice = 3;
  w.members.push_back({11, "node-a", Identity{0, 2, 0, 1, 0, 2}});
  w.members.push_back({4, "10.0.0.2", Identity{1, 2, 0, 1, 1, 2}});
  World back = decodeWorld(encodeWorld(w));
  EXPECT_EQ(back.version, 7);
  EXPECT_EQ(back.notice, 3);
  ASSERT_EQ(back.members.size(), 2u);
  EXPECT_EQ(back.members[1].worker, 4);
  EXPECT_EQ(back.members[1].host, "10.0.0.2");
  EXPECT_EQ(back.members[1].identity.crossRank, 1);
  EXPECT_EQ(back.members[1].identity.size, 2);
  ASSERT_NE(back.find(11), nullptr);
  EXPECT_EQ(back.find(11)->identity.rank, 0);
  EXPECT_EQ(back.find(5), nullptr);
}

TEST(WorldRecord, MalformedRecordsAreInternalErrors) {
  EXPECT_THROW(decodeWorld(""), Internal);
  EXPECT_THROW(decodeWorld("kolo-world 1\nversion 1\nnotice 0\nsize 2\nmember 0 1 0/1 0/1 h\n"),
               Internal);  // a member short
  EXPECT_THROW(decodeWorld("kolo-world 1\nversion 1\nnotice 0\nsize 1\nmember 1 1 0/1 0/1 h\n"),
               Internal);  // rank out of order
  EXPECT_THROW(decodeWorld("kolo-world 1\nversion 1\nnotice 0\nsize 1\nmember 0 1 2/1 0/1 h\n"),
               Internal);  // local rank out of range
}

// The shares of ranks 0..n-1 of n over the same sampler state.
std::vector<std::vector<int64_t>> shares(const ElasticSampler& like, int n) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < n; ++r) {
    ElasticSampler s(like.dataset_size(), true, 5);
    s.load_state_dict(like.state_dict());
    s.reset(r, n);
    out.push_back(s.indices());
  }
  return out;
}

TEST(Sampler, EpochOrderIsAPermutationFixedBySeedAndEpoch) {
  ElasticSampler a(100, true, 5), b(100, true, 5);
  EXPECT_EQ(a.indices(), b.indices());
  std::set<int64_t> all(a.indices().begin(), a.indices().end());
  EXPECT_EQ(all.size(), 100u);
  b.set_epoch(1);
  EXPECT_NE(a.indices(), b.indices());
  ElasticSampler plain(5, false, 0);
  EXPECT_EQ(plain.indices(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // The same seed gives the same order everywhere (mt19937_64 is fixed).
  EXPECT_EQ(a.indices()[0], ElasticSampler(100, true, 5).indices()[0]);
}

TEST(Sampler, ProcessedIsAPrefixAndTheRestIsRepartitioned) {
  ElasticSampler s(100, true, 5);
  const std::vector<int64_t> order = s.indices();  // size 1: the whole epoch
  s.record_batch(0, 10);
  s.record_batch(1, 10);
  EXPECT_EQ(s.processed_num(), 20);
  EXPECT_EQ(s.processed_indices(), std::vector<int64_t>(order.begin(), order.begin() + 20));
  s.reset();
  EXPECT_EQ(s.indices(), std::vector<int64_t>(order.begin() + 20, order.end()));
  EXPECT_EQ(s.get_indices(1, 8), std::vector<int64_t>(order.begin() + 28, order.begin() + 36));
  EXPECT_EQ(s.get_indices(10, 8), std::vector<int64_t>(order.begin() + 100, order.end()));

  // 80 left over 3 ranks: 27 each, 1 padded index (the rest's first);
  // rank r takes every third index of the rest from r on.
  auto parts = shares(s, 3);
  EXPECT_EQ(parts[1][0], order[21]);
  EXPECT_EQ(parts[1][1], order[24]);
  EXPECT_EQ(parts[2].back(), order[20]);  // the padding
  std::multiset<int64_t> seen;
  for (const auto& p : parts) {
    EXPECT_EQ(p.size(), 27u);
    seen.insert(p.begin(), p.end());
  }
  EXPECT_EQ(seen.size(), 81u);
  EXPECT_EQ(seen.count(order[20]), 2u);
  for (size_t i = 21; i < 100; ++i) EXPECT_EQ(seen.count(order[i]), 1u);
}

TEST(Sampler, StateRoundTripsAndBadStateIsRefused) {
  ElasticSampler s(50, true, 1);
  s.set_epoch(3);
  s.record_batch(0, 7);
  ElasticSampler t(50, true, 1);
  t.load_state_dict(s.state_dict());
  EXPECT_EQ(t.epoch(), 3);
  EXPECT_EQ(t.processed_num(), 7);
  s.reset();
  EXPECT_EQ(t.indices(), s.indices());
  EXPECT_EQ(t.indices().size(), 43u);
  EXPECT_THROW(t.load_state_dict("epoch=x processed=1"), InvalidArgument);
  EXPECT_THROW(t.load_state_dict("processed=1"), InvalidArgument);
  s.set_epoch(4);
  EXPECT_EQ(s.processed_num(), 0);
  s.record_batch(0, 1000);
  EXPECT_EQ(s.processed_num(), 50);
  EXPECT_TRUE(s.indices().size() == 50u);  // reset() not called yet
  s.reset();
  EXPECT_TRUE(s.indices().empty());
}

}  // namespace
}  // namespace kolo::elastic
