// Process sets through real engines (Gloo), ranks as threads: operations
// negotiated among a set's ranks only, sets progressing independently, ranks
// outside a set never waiting on it, static and added sets, removal, and the
// errors of each (naming the set).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/ops_util.h"
#include "harness/harness.h"

namespace kolo::test {
namespace {

using std::chrono::milliseconds;

Handle allreduce(Engine& engine, const std::string& name, std::vector<float>& v, int set,
                 ReduceOp op = ReduceOp::kSum) {
  Request q = makeRequest(name, OpType::kAllreduce, DataType::kFloat32,
                          {static_cast<int64_t>(v.size())}, op);
  q.processSet = set;
  return engine.enqueue(q, Entry{v.data(), v.data(), {}, {}});
}

// Allocating entry for allgather/alltoall/reducescatter into out.
Entry negotiated(const std::vector<float>& in, std::vector<float>& out) {
  Entry e;
  e.input = in.data();
  e.allocate = [&out](const std::vector<int64_t>& shape) {
    out.assign(static_cast<size_t>(numElements(shape)), -1.0f);
    return static_cast<void*>(out.data());
  };
  return e;
}

// Polls until pred() or the limit; false on timeout.
template <typename Pred>
bool eventually(Pred pred, milliseconds limit = milliseconds(5000)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return pred();
}

TEST(ProcessSets, OpsRunAmongMembersOnlyAndOutsideRanksNeverWait) {
  // Rank 1 is outside set {0,2}: it does nothing until the set's allreduce
  // completed on both members, which must not need it.
  std::atomic<int> setDone{0};
  spawn(3, [&](int rank, Engine& engine) {
    const int set = engine.addProcessSet({2, 0});
    EXPECT_EQ(set, 1);
    const ProcessSetInfo info = engine.processSet(set);
    EXPECT_EQ(info.ranks, (std::vector<int>{0, 2}));
    EXPECT_EQ(info.included(), rank != 1);
    EXPECT_EQ(info.rank, rank == 0 ? 0 : rank == 2 ? 1 : -1);
    if (rank != 1) {
      std::vector<float> v(5, static_cast<float>(rank + 1));
      allreduce(engine, "x", v, set).wait();
      EXPECT_FLOAT_EQ(v[4], 1.0f + 3.0f);  // ranks 0 and 2 only
      // Counted in the set's statistics, and in the engine's totals.
      EXPECT_EQ(engine.stats(set).responses, 1u);
      EXPECT_GE(engine.stats(set).cycles, 1u);
      EXPECT_GE(engine.stats().responses, 1u);
      ++setDone;
    } else {
      ASSERT_TRUE(eventually([&] { return setDone == 2; }))
          << "the set's members waited for rank 1, which is not in the set";
      EXPECT_THROW(engine.stats(set), InvalidArgument);
      std::vector<float> v(2);
      try {
        allreduce(engine, "x", v, set);
        ADD_FAILURE() << "an op on a set this rank is not in must be refused";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("not a member of process set 1 (ranks 0,2)"),
                  std::string::npos)
            << e.what();
      }
    }
    // The same name in the global set is another tensor.
    std::vector<float> g(3, 1.0f);
    allreduce(engine, "x", g, 0).wait();
    EXPECT_FLOAT_EQ(g[0], 3.0f);
    EXPECT_GT(engine.stats(0).responses, 0u);
  });
}

TEST(ProcessSets, SetsProgressIndependently) {
  // Overlapping sets A = {0,1} and B = {1,2}: while A's tensor waits for
  // rank 0, B runs many tensors to completion on ranks 1 and 2.
  std::atomic<bool> bDone{false};
  spawnWithSets(3, {{0, 1}, {1, 2}}, [&](int rank, Engine& engine) {
    const int a = 1, b = 2;
    Handle pendingA;
    std::vector<float> va(4, 1.0f);
    if (rank == 1) pendingA = allreduce(engine, "a", va, a);
    if (rank != 0) {
      for (int step = 0; step < 20; ++step) {
        std::vector<float> vb(3, static_cast<float>(rank));
        allreduce(engine, "b" + std::to_string(step % 4), vb, b).wait();
        EXPECT_FLOAT_EQ(vb[0], 3.0f);
      }
      if (rank == 1) {
        EXPECT_FALSE(pendingA.poll()) << "A cannot complete before rank 0 submits";
        bDone = true;
      }
    }
    if (rank == 0) {
      ASSERT_TRUE(eventually([&] { return bDone.load(); }, milliseconds(20000)));
      allreduce(engine, "a", va, a).wait();
    }
    if (rank == 1) pendingA.wait();
    if (rank != 2) EXPECT_FLOAT_EQ(va[0], 2.0f);
    EXPECT_GT(engine.stats().cycles, 0u);
    engine.barrier().wait();  // a rank that shuts down ends the job for all
  });
}

TEST(ProcessSets, AnIdleRankOutsideTheSetDoesNotSlowItDown) {
  // Every set's cycles follow set 0's, in which every rank takes part. An
  // idle rank backs off to 16 cycle times between cycles unless it learns
  // that some rank has work: with a 10 ms cycle, 10 operations of set {0,1}
  // would take 1.6 s or more behind an idle rank 2; they take about 0.1 s.
  Config config = testConfig();
  config.cycleTime = std::chrono::milliseconds(10);
  std::atomic<bool> done{false};
  double seconds = 0;
  spawnWithSets(
      3, {{0, 1}},
      [&](int rank, Engine& engine) {
        if (rank == 2) {
          while (!done) std::this_thread::sleep_for(milliseconds(5));
          engine.barrier().wait();
          return;
        }
        std::this_thread::sleep_for(milliseconds(300));  // rank 2 is in full back-off now
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < 10; ++i) {
          std::vector<float> v(2, 1.0f);
          allreduce(engine, "paced", v, 1).wait();
        }
        if (rank == 0) {
          seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                        .count();
          done = true;
        }
        engine.barrier().wait();
      },
      config);
  EXPECT_LT(seconds, 1.0) << "the set's ops were paced by the idle rank outside it";
}

TEST(ProcessSets, EveryOperationUsesTheSetsRanksAndOrder) {
  spawnWithSets(3, {{1, 2}}, [&](int rank, Engine& engine) {
    // Every rank leaves through a global barrier: a rank that shuts down
    // ends the job for all.
    if (rank == 0) {
      engine.barrier().wait();
      return;
    }
    const int set = 1;
    const int me = rank - 1;  // rank within {1,2}
    // broadcast: root is a rank of the job
    std::vector<float> b(3, static_cast<float>(rank));
    Request bq = makeRequest("bc", OpType::kBroadcast, DataType::kFloat32, {3});
    bq.root = 2;
    bq.processSet = set;
    engine.enqueue(bq, Entry{b.data(), b.data(), {}, {}}).wait();
    EXPECT_FLOAT_EQ(b[1], 2.0f);
    // allgather: blocks in the set's rank order, rank r gives r rows
    std::vector<float> in(static_cast<size_t>(rank) * 2, static_cast<float>(rank)), out;
    Request gq = makeRequest("ag", OpType::kAllgather, DataType::kFloat32, {rank, 2});
    gq.processSet = set;
    Handle gh = engine.enqueue(gq, negotiated(in, out));
    gh.wait();
    EXPECT_EQ(gh.outputShape(), (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(out, (std::vector<float>{1, 1, 2, 2, 2, 2}));
    // alltoall: splits per member of the set
    std::vector<float> send = {10.0f * rank, 10.0f * rank + 1, 10.0f * rank + 2}, recv;
    Request aq = makeRequest("a2a", OpType::kAlltoall, DataType::kFloat32, {3});
    aq.splits = me == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{2, 1};
    aq.processSet = set;
    Handle ah = engine.enqueue(aq, negotiated(send, recv));
    ah.wait();
    EXPECT_EQ(ah.receivedSplits(), me == 0 ? (std::vector<int64_t>{1, 2})
                                           : (std::vector<int64_t>{2, 1}));
    EXPECT_EQ(recv, me == 0 ? (std::vector<float>{10, 20, 21}) : (std::vector<float>{11, 12, 22}));
    // reducescatter: 3 rows over 2 ranks -> 2 and 1, averaged over the set
    std::vector<float> rin = {1.0f * rank, 2.0f * rank, 3.0f * rank}, rout;
    Request rq = makeRequest("rs", OpType::kReducescatter, DataType::kFloat32, {3},
                             ReduceOp::kAverage);
    rq.processSet = set;
    engine.enqueue(rq, negotiated(rin, rout)).wait();
    EXPECT_EQ(rout, me == 0 ? (std::vector<float>{1.5f, 3.0f}) : (std::vector<float>{4.5f}));
    // alltoall splits must have one entry per member
    Request bad = aq;
    bad.name = "a2a.bad";
    bad.splits = {1, 1, 1};
    EXPECT_THROW(engine.enqueue(bad, negotiated(send, recv)), InvalidArgument);
    // a root outside the set
    Request outside = bq;
    outside.name = "bc.outside";
    outside.root = 0;
    try {
      engine.enqueue(outside, Entry{b.data(), b.data(), {}, {}});
      ADD_FAILURE() << "root 0 is not in the set";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("root rank 0 is not a member of process set 1"),
                std::string::npos)
          << e.what();
    }
    engine.barrier().wait();
  });
}

TEST(ProcessSets, MismatchesFailOnTheSetsRanksNamingTheSet) {
  spawn(3, [&](int rank, Engine& engine) {
    const int set = engine.addProcessSet({0, 2});
    if (rank == 1) {
      engine.barrier().wait();
      return;
    }
    std::vector<float> v(rank == 0 ? 2 : 3, 1.0f);
    try {
      allreduce(engine, "mm", v, set).wait();
      ADD_FAILURE() << "shapes differ";
    } catch (const Mismatch& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("process set 1 (ranks 0,2): tensor 'mm'"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 0 sent float32[2], rank 2 sent float32[3]"), std::string::npos)
          << what;
    }
    std::vector<float> ok(2, 1.0f);
    allreduce(engine, "mm.after", ok, set).wait();
    EXPECT_FLOAT_EQ(ok[0], 2.0f);
    engine.barrier().wait();
  });
}

TEST(ProcessSets, AddAndRemoveCheckTheirArguments) {
  spawn(2, [&](int rank, Engine& engine) {
    EXPECT_THROW(engine.addProcessSet({}), InvalidArgument);
    EXPECT_THROW(engine.addProcessSet({0, 2}), InvalidArgument);
    EXPECT_THROW(engine.addProcessSet({1, 1}), InvalidArgument);
    EXPECT_THROW(engine.addProcessSet({1, 0}), InvalidArgument);  // the global set's ranks
    EXPECT_THROW(engine.removeProcessSet(0), InvalidArgument);
    EXPECT_THROW(engine.removeProcessSet(7), InvalidArgument);
    const int solo = engine.addProcessSet({0});
    EXPECT_EQ(solo, 1);
    EXPECT_THROW(engine.addProcessSet({0}), InvalidArgument);  // exists
    if (rank == 0) {
      std::vector<float> v(1, 3.0f);
      allreduce(engine, "solo", v, solo).wait();  // a set of one
      EXPECT_FLOAT_EQ(v[0], 3.0f);
    }
    engine.removeProcessSet(solo);
    EXPECT_EQ(engine.processSets().size(), 1u);
  });
}

TEST(ProcessSets, MismatchedAddsFailOnEveryRankAndRemovalFailsPendingOps) {
  spawn(3, [&](int rank, Engine& engine) {
    try {
      engine.addProcessSet(rank == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 2});
      ADD_FAILURE() << "ranks asked for different sets";
    } catch (const Mismatch& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0 asked for a process set of ranks [0,1], "
                                           "rank 1 for a process set of ranks [0,2]"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(engine.processSets().size(), 1u);
    const int set = engine.addProcessSet({0, 1});
    Handle h;
    std::vector<float> v(2, 1.0f);
    if (rank == 0) h = allreduce(engine, "never", v, set);  // rank 1 never submits it
    engine.removeProcessSet(set);
    if (rank == 0) {
      try {
        h.wait();
        ADD_FAILURE() << "the op's set was removed";
      } catch (const InvalidArgument& e) {
        // Removed while pending, or before it reached the loop.
        EXPECT_NE(std::string(e.what()).find("process set 1"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("was removed"), std::string::npos)
            << e.what();
      }
    }
    EXPECT_THROW(engine.processSet(set), InvalidArgument);
    EXPECT_THROW(allreduce(engine, "late", v, set), InvalidArgument);
    // Ids are never reused.
    EXPECT_EQ(engine.addProcessSet({1, 2}), set + 1);
  });
}

TEST(ProcessSets, StaticSetsMustBeTheSameOnEveryRank) {
  auto store = makeHashStore();
  runRanks(2, [&](int rank) {
    try {
      Engine engine(testConfig(), localIdentity(rank, 2), store,
                    rank == 0 ? std::vector<std::vector<int>>{{0}}
                              : std::vector<std::vector<int>>{{1}});
      ADD_FAILURE() << "rank " << rank << " accepted process sets other ranks did not pass";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 passed [1] but rank 0 passed [0]"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(ProcessSets, JoinAndBarrierArePerSet) {
  spawnWithSets(3, {{0, 2}}, [&](int rank, Engine& engine) {
    const int set = 1;
    if (rank == 1) {
      // Outside the set: only the global allreduce involves it.
      std::vector<float> g(2, 5.0f);
      allreduce(engine, "g", g, 0).wait();
      EXPECT_FLOAT_EQ(g[0], 5.0f * 3);
      return;
    }
    if (rank == 0) {
      Handle j = engine.join(set);
      j.wait();
      EXPECT_EQ(j.joinResult(), 2);
    } else {
      std::vector<float> v(3, 4.0f);
      allreduce(engine, "j", v, set).wait();
      EXPECT_FLOAT_EQ(v[0], 4.0f) << "rank 0 joined the set: zeros";
      engine.join(set).wait();
    }
    engine.barrier(set).wait();
    std::vector<float> g(2, 5.0f);
    allreduce(engine, "g", g, 0).wait();
    EXPECT_FLOAT_EQ(g[0], 15.0f);
  });
}

}  // namespace
}  // namespace kolo::test
