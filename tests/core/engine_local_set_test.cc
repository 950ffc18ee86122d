// Local process sets (Engine::addLocalProcessSet) through real engines
// (Gloo), ranks as threads: sets made and removed by their members alone,
// in orders that differ between ranks; several sets with the same ranks; a
// set beside one every rank added; the errors of each; and a stall that
// ends one local set but not the engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/ops_util.h"
#include "harness/harness.h"

namespace kolo::test {
namespace {

Handle allreduce(Engine& engine, const std::string& name, std::vector<float>& v, int set) {
  Request q =
      makeRequest(name, OpType::kAllreduce, DataType::kFloat32, {static_cast<int64_t>(v.size())});
  q.processSet = set;
  return engine.enqueue(q, Entry{v.data(), v.data(), {}, {}});
}

bool hasKey(const Engine& engine, const std::string& key) {
  auto sets = engine.processSets();
  return std::any_of(sets.begin(), sets.end(),
                     [&](const ProcessSetInfo& i) { return i.key == key; });
}

TEST(LocalProcessSets, MembersAloneMakeUseAndRemoveThemInTheirOwnOrder) {
  // Three sets over three ranks, each rank in two of them: a = {0,1},
  // b = {1,2}, c = {0,2}. Each rank creates, uses and removes its two in
  // its own order, and never calls anything for the third.
  struct Plan {
    std::vector<std::string> keys;  // creation and removal order
    std::vector<std::string> useOrder;
  };
  const std::vector<Plan> plans = {
      {{"a", "c"}, {"c", "a"}},  // rank 0
      {{"b", "a"}, {"a", "b"}},  // rank 1
      {{"b", "c"}, {"c", "b"}},  // rank 2
  };
  const std::map<std::string, std::vector<int>> members = {
      {"a", {0, 1}}, {"b", {1, 2}}, {"c", {0, 2}}};
  spawn(3, [&](int rank, Engine& engine) {
    std::map<std::string, int> ids;
    for (const auto& key : plans[rank].keys) {
      std::vector<int> ranks = members.at(key);
      std::reverse(ranks.begin(), ranks.end());  // any order of ranks
      const int id = engine.addLocalProcessSet(key, ranks);
      EXPECT_GE(id, Engine::kFirstLocalProcessSetId);
      const ProcessSetInfo info = engine.processSet(id);
      EXPECT_EQ(info.key, key);
      EXPECT_EQ(info.ranks, members.at(key));
      EXPECT_TRUE(info.included());
      ids[key] = id;
    }
    // Ids are this rank's own: numbered in its creation order.
    EXPECT_EQ(ids[plans[rank].keys[1]], ids[plans[rank].keys[0]] + 1);
    const std::string other = rank == 0 ? "b" : rank == 1 ? "c" : "a";
    EXPECT_FALSE(hasKey(engine, other)) << "rank " << rank << " learned of a set it is not in";
    // All ops in flight at once, enqueued in a different order on each rank.
    std::map<std::string, std::vector<float>> values;
    std::vector<Handle> handles;
    for (const auto& key : plans[rank].useOrder) {
      values[key].assign(3, static_cast<float>(rank + 1));
      handles.push_back(allreduce(engine, "x", values[key], ids[key]));
    }
    for (auto& h : handles) h.wait();
    for (const auto& key : plans[rank].useOrder) {
      float expect = 0;
      for (int r : members.at(key)) expect += static_cast<float>(r + 1);
      EXPECT_FLOAT_EQ(values[key][2], expect) << "set " << key << " on rank " << rank;
      EXPECT_EQ(engine.stats(ids[key]).responses, 1u);
    }
    // Set 0 goes on beside them.
    std::vector<float> all(2, 1.0f);
    allreduce(engine, "all", all, 0).wait();
    EXPECT_FLOAT_EQ(all[0], 3.0f);
    for (const auto& key : plans[rank].keys) {
      engine.removeLocalProcessSet(ids[key]);
      EXPECT_FALSE(hasKey(engine, key));
      EXPECT_THROW(engine.processSet(ids[key]), InvalidArgument);
    }
    EXPECT_EQ(engine.processSets().size(), 1u);
    // A rank that shuts down ends the job: wait for the others' removals.
    engine.barrier().wait();
  });
}

TEST(LocalProcessSets, SameRanksTwiceAndBesideASetEveryRankAdded) {
  spawn(3, [&](int rank, Engine& engine) {
    int x = -1, y = -1;
    if (rank < 2) {
      // Opposite creation orders of two sets of the same ranks would wait
      // on each other (each call blocks until its members came); the same
      // order is what a program does, and both sets then exist.
      x = engine.addLocalProcessSet("x", {0, 1});
      y = engine.addLocalProcessSet("y", {0, 1});
      EXPECT_NE(x, y);
    }
    // A set of the same ranks that every rank adds is not confused with them.
    const int global = engine.addProcessSet({0, 1});
    EXPECT_LT(global, Engine::kFirstLocalProcessSetId);
    if (rank < 2) {
      std::vector<float> vx(1, 1.0f), vy(1, 10.0f), vg(1, 100.0f);
      // Enqueued in opposite orders on the two members.
      std::vector<Handle> hs;
      if (rank == 0) {
        hs = {allreduce(engine, "t", vx, x), allreduce(engine, "t", vy, y),
              allreduce(engine, "t", vg, global)};
      } else {
        hs = {allreduce(engine, "t", vg, global), allreduce(engine, "t", vy, y),
              allreduce(engine, "t", vx, x)};
      }
      for (auto& h : hs) h.wait();
      EXPECT_FLOAT_EQ(vx[0], 2.0f);
      EXPECT_FLOAT_EQ(vy[0], 20.0f);
      EXPECT_FLOAT_EQ(vg[0], 200.0f);
      engine.removeLocalProcessSet(y);
      engine.removeLocalProcessSet(x);
    }
    engine.removeProcessSet(global);
  });
}

template <typename E>
std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LocalProcessSets, BadCallsNameWhatIsWrong) {
  Config config = testConfig();
  config.timeout = std::chrono::seconds(2);
  spawn(
      2,
      [&](int rank, Engine& engine) {
        EXPECT_NE(errorOf<InvalidArgument>([&] {
                    engine.addLocalProcessSet("", {0, 1});
                  }).find("the key is empty"),
                  std::string::npos);
        const std::string notMember =
            errorOf<InvalidArgument>([&] { engine.addLocalProcessSet("k", {1 - rank}); });
        EXPECT_NE(notMember.find("is not a member of process set 'k' (ranks " +
                                 std::to_string(1 - rank) + ")"),
                  std::string::npos)
            << notMember;
        EXPECT_NE(errorOf<InvalidArgument>([&] {
                    engine.addLocalProcessSet("k", {0, 5});
                  }).find("rank 5 is not a rank of this job"),
                  std::string::npos);
        const int id = engine.addLocalProcessSet("k", {0, 1});
        EXPECT_NE(errorOf<InvalidArgument>([&] {
                    engine.addLocalProcessSet("k", {0, 1});
                  }).find("key 'k' was given before"),
                  std::string::npos);
        EXPECT_NE(errorOf<InvalidArgument>([&] {
                    engine.removeProcessSet(id);
                  }).find("is a local set; its members remove it with remove_local_process_set"),
                  std::string::npos);
        const int global = engine.addProcessSet({0});
        EXPECT_NE(errorOf<InvalidArgument>([&] {
                    engine.removeLocalProcessSet(global);
                  }).find("was added by every rank"),
                  std::string::npos);
        engine.removeLocalProcessSet(id);
        EXPECT_NE(errorOf<InvalidArgument>([&] {
                    engine.removeLocalProcessSet(id);
                  }).find("does not exist"),
                  std::string::npos);
        // A member that never comes: the one that did is told which set
        // and members it waited for.
        if (rank == 0) {
          const std::string lonely = errorOf<Timeout>([&] {
            engine.addLocalProcessSet("lonely", {0, 1});
          });
          EXPECT_NE(lonely.find("process set 'lonely' (ranks 0,1)"), std::string::npos) << lonely;
        }
        engine.barrier().wait();
      },
      config);
}

TEST(LocalProcessSets, AStallEndsThatSetOnItsMembersAndTheEngineGoesOn) {
  Config config = testConfig();
  config.stallCheckTime = std::chrono::milliseconds(200);
  config.stallShutdownTime = std::chrono::milliseconds(600);
  std::vector<std::string> errors(3);
  ThreadBarrier stallOver(3);
  spawn(
      3,
      [&](int rank, Engine& engine) {
        int id = -1;
        if (rank != 1) id = engine.addLocalProcessSet("s", {0, 2});
        if (rank == 0) {
          std::vector<float> v(4, 1.0f);
          // Rank 2 (a member) never submits 'loss'.
          errors[0] = errorOf<Timeout>([&] { allreduce(engine, "loss", v, id).wait(); });
        }
        if (rank == 2) {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (hasKey(engine, "s") && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          EXPECT_FALSE(hasKey(engine, "s")) << "the stall did not end the set on rank 2";
        }
        if (rank != 1) {
          EXPECT_FALSE(hasKey(engine, "s"));
          // A later op on it is told why the set is gone.
          std::vector<float> v(1, 1.0f);
          const std::string after = errorOf<Timeout>([&] { allreduce(engine, "after", v, id); });
          EXPECT_NE(after.find("the set was ended by this stall: process set 's' (ranks 0,2): "
                               "stalled for more than 0.6 s"),
                    std::string::npos)
              << after;
        }
        // The engine and set 0 go on, on every rank (rank 1 submits only
        // once the others are done: set 0's stalls end the job).
        stallOver.arrive();
        EXPECT_TRUE(engine.failure().ok()) << engine.failure().message;
        std::vector<float> all(1, 1.0f);
        allreduce(engine, "all", all, 0).wait();
        EXPECT_FLOAT_EQ(all[0], 3.0f);
      },
      config);
  EXPECT_NE(errors[0].find("process set 's' (ranks 0,2)"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("'loss' missing on ranks [2]"), std::string::npos) << errors[0];
}

// A set's own limits (ProcessSetLimits): its stall ends at its own
// shutdown time, named by its own setting, while the engine, whose stalls
// never end, goes on; and bad limits are refused before the key is taken.
TEST(LocalProcessSets, ASetsOwnLimitsEndItsStallsWhileTheEngineKeepsItsOwn) {
  Config config = testConfig();
  config.stallCheckTime = std::chrono::milliseconds(0);
  config.stallShutdownTime = std::chrono::milliseconds(0);  // the engine's: never
  std::vector<std::string> errors(2);
  spawn(
      2,
      [&](int rank, Engine& engine) {
        ProcessSetLimits bad;
        bad.timeout = std::chrono::milliseconds(0);
        EXPECT_NE(errorOf<InvalidArgument>([&] {
                    engine.addLocalProcessSet("limited", {0, 1}, bad);
                  }).find("the set's timeout must be positive"),
                  std::string::npos);
        ProcessSetLimits limits;
        limits.timeout = std::chrono::seconds(5);
        limits.stallCheckTime = std::chrono::milliseconds(100);
        limits.stallShutdownTime = std::chrono::milliseconds(400);
        limits.stallShutdownSetting = "the group's timeout";
        const int id = engine.addLocalProcessSet("limited", {0, 1}, limits);  // the key is free
        std::vector<float> v(2, 1.0f);
        // Each rank submits a tensor the other never does.
        errors[rank] = errorOf<Timeout>(
            [&] { allreduce(engine, "only." + std::to_string(rank), v, id).wait(); });
        EXPECT_TRUE(engine.failure().ok()) << engine.failure().message;
        std::vector<float> all(1, 1.0f);
        allreduce(engine, "all", all, 0).wait();
        EXPECT_FLOAT_EQ(all[0], 2.0f);
      },
      config);
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("process set 'limited' (ranks 0,1)"), std::string::npos) << e;
    EXPECT_NE(e.find("stalled for more than 0.4 s (the group's timeout)"), std::string::npos)
        << e;
  }
}

}  // namespace
}  // namespace kolo::test
