// Negotiation behaviour: fusion, response cache, mismatch errors, duplicate
// names, groups and join, observed through real engines and their counters.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "kolo/build_config.h"
#include "core/ops_util.h"
#include "harness/harness.h"

namespace kolo::test {
namespace {

std::vector<Handle> submitFloats(Engine& engine, std::vector<std::vector<float>>& bufs,
                                 const std::string& prefix) {
  std::vector<Handle> handles;
  for (size_t k = 0; k < bufs.size(); ++k) {
    Entry e;
    e.input = bufs[k].data();
    e.output = bufs[k].data();
    handles.push_back(engine.enqueue(
        makeRequest(prefix + std::to_string(k), OpType::kAllreduce, DataType::kFloat32,
                    {static_cast<int64_t>(bufs[k].size())}),
        e));
  }
  return handles;
}

void waitAll(const std::vector<Handle>& handles) {
  for (const auto& h : handles) h.wait();
}

// A group is released in one cycle, so its fusion is deterministic.
std::vector<Handle> submitGroup(Engine& engine, std::vector<std::vector<float>>& bufs) {
  std::vector<Request> reqs;
  std::vector<Entry> entries;
  for (size_t k = 0; k < bufs.size(); ++k) {
    reqs.push_back(makeRequest("g" + std::to_string(k), OpType::kAllreduce, DataType::kFloat32,
                               {static_cast<int64_t>(bufs[k].size())}));
    entries.push_back(Entry{bufs[k].data(), bufs[k].data(), {}, {}});
  }
  return engine.enqueueGroup(reqs, entries);
}

TEST(Fusion, FusesIntoFewBackendCallsAndRespectsThreshold) {
  for (int64_t threshold : {int64_t{0}, int64_t{64 * 1024}, int64_t{128} << 20}) {
    Config config = testConfig();
    config.fusionThresholdBytes = threshold;
    std::atomic<uint64_t> calls{0};
    spawn(2, [&](int rank, Engine& engine) {
      for (int step = 0; step < 2; ++step) {  // negotiated, then from the cache
        std::vector<std::vector<float>> bufs(64, std::vector<float>(4096, 1.0f + rank));
        auto before = engine.stats();
        waitAll(submitGroup(engine, bufs));
        auto after = engine.stats();
        for (auto& b : bufs) ASSERT_FLOAT_EQ(b[17], 3.0f);
        if (rank == 0 && step == 1) calls = after.backendCalls - before.backendCalls;
      }
    }, config);
    // 64 tensors of 16 KiB: no fusion -> 64 calls; 64 KiB -> 4 per call; 128 MiB -> one.
    if (threshold == 0) EXPECT_EQ(calls.load(), 64u);
    if (threshold == 64 * 1024) EXPECT_EQ(calls.load(), 16u);
    if (threshold == (int64_t{128} << 20)) EXPECT_EQ(calls.load(), 1u);
  }
}

TEST(Fusion, TensorsSubmittedTogetherShareCalls) {
  spawn(2, [&](int rank, Engine& engine) {
    std::vector<std::vector<float>> bufs(64, std::vector<float>(1024, 1.0f + rank));
    auto before = engine.stats();
    waitAll(submitFloats(engine, bufs, "f"));
    auto after = engine.stats();
    for (auto& b : bufs) ASSERT_FLOAT_EQ(b[3], 3.0f);
    // The loop wakes on the first tensor, so the rest batch up behind it.
    EXPECT_LT(after.backendCalls - before.backendCalls, 64u);
  });
}

TEST(Cache, SteadyStateSkipsCoordinatorAndInvalidatesOnShapeChange) {
  ThreadBarrier counted(3);
  spawn(3, [&](int rank, Engine& engine) {
    std::vector<std::vector<float>> bufs(10, std::vector<float>(100, 1.0f));
    waitAll(submitFloats(engine, bufs, "w"));  // first step: negotiated, cached
    auto before = engine.stats();
    for (int step = 0; step < 5; ++step) {
      for (auto& b : bufs) std::fill(b.begin(), b.end(), 1.0f);
      waitAll(submitFloats(engine, bufs, "w"));
      ASSERT_FLOAT_EQ(bufs[3][5], 3.0f);
    }
    auto after = engine.stats();
    EXPECT_EQ(after.coordinatorRounds, before.coordinatorRounds)
        << "steady state must not gather requests to the coordinator";
    EXPECT_EQ(after.cachedResponses - before.cachedResponses, 50u);
    // Every rank has counted before any re-negotiates below: a rank that
    // went ahead would make the others take part in its coordinator round
    // while they still count (ASan under load: 1 run in 30).
    counted.arrive();

    // Same name, new shape on every rank: re-negotiated, correct result.
    std::vector<float> bigger(250, static_cast<float>(rank));
    Entry e;
    e.input = bigger.data();
    e.output = bigger.data();
    engine.enqueue(makeRequest("w3", OpType::kAllreduce, DataType::kFloat32, {250}), e).wait();
    EXPECT_FLOAT_EQ(bigger[249], 3.0f);  // 0 + 1 + 2
    EXPECT_GT(engine.stats().coordinatorRounds, after.coordinatorRounds);
  });
}

TEST(Cache, DisabledCacheStillWorksAndTinyCacheEvicts) {
  for (int capacity : {0, 3}) {
    Config config = testConfig();
    config.cacheCapacity = capacity;
    spawn(2, [&](int, Engine& engine) {
      for (int step = 0; step < 4; ++step) {
        std::vector<std::vector<float>> bufs(8, std::vector<float>(33, 2.0f));
        waitAll(submitFloats(engine, bufs, "e"));
        for (auto& b : bufs) ASSERT_FLOAT_EQ(b[32], 4.0f) << "capacity " << capacity;
      }
    }, config);
  }
}

TEST(Cache, ShapeChangeOnOneRankIsAMismatchNotAHang) {
  spawn(2, [&](int rank, Engine& engine) {
    std::vector<float> a(8, 1.0f);
    Entry e;
    e.input = a.data();
    e.output = a.data();
    engine.enqueue(makeRequest("x", OpType::kAllreduce, DataType::kFloat32, {8}), e).wait();
    std::vector<float> b(rank == 0 ? 8 : 4, 1.0f);
    Entry eb;
    eb.input = b.data();
    eb.output = b.data();
    Handle h = engine.enqueue(makeRequest("x", OpType::kAllreduce, DataType::kFloat32,
                                          {static_cast<int64_t>(b.size())}), eb);
    EXPECT_THROW(h.wait(), Mismatch);
  });
}

struct MismatchCase {
  std::string name;
  std::function<void(Request&, int rank)> mutate;
  std::string expect;  // substring of the error
};

TEST(Mismatch, EveryKindFailsOnEveryRankWhileOthersComplete) {
  std::vector<MismatchCase> cases = {
      {"shape", [](Request& q, int r) { q.shape = r == 0 ? std::vector<int64_t>{3, 4} : std::vector<int64_t>{4, 3}; },
       "ranks disagree on shape: rank 0 sent float32[3,4], rank 1 sent float32[4,3]"},
      {"dtype", [](Request& q, int r) { if (r == 1) q.dtype = DataType::kFloat64; },
       "ranks disagree on dtype: rank 0 sent float32[3,4], rank 1 sent float64[3,4]"},
      {"op", [](Request& q, int r) { if (r == 1) q.op = OpType::kBroadcast; },
       "ranks disagree on the operation: rank 0 sent allreduce, rank 1 sent broadcast"},
      {"reduce", [](Request& q, int r) { if (r == 1) q.reduceOp = ReduceOp::kMax; },
       "ranks disagree on the reduce op: rank 0 sent sum, rank 1 sent max"},
      {"prescale", [](Request& q, int r) { if (r == 1) q.prescale = 0.5; },
       "ranks disagree on prescale factor: rank 0 sent 1, rank 1 sent 0.5"},
      {"postscale", [](Request& q, int r) { if (r == 1) q.postscale = 2; },
       "ranks disagree on postscale factor: rank 0 sent 1, rank 1 sent 2"},
      {"root", [](Request& q, int r) { q.op = OpType::kBroadcast; q.root = r; },
       "ranks disagree on root rank: rank 0 sent 0, rank 1 sent 1"},
  };
  for (const auto& c : cases) {
    spawn(2, [&](int rank, Engine& engine) {
      std::vector<float> bad(16, 1.0f), good(5, 1.0f);
      Request q = makeRequest("bad_" + c.name, OpType::kAllreduce, DataType::kFloat32, {3, 4});
      c.mutate(q, rank);
      Entry e;
      e.input = bad.data();
      e.output = bad.data();
      Handle hb = engine.enqueue(q, e);
      Entry g;
      g.input = good.data();
      g.output = good.data();
      Handle hg = engine.enqueue(makeRequest("good", OpType::kAllreduce, DataType::kFloat32, {5}), g);
      try {
        hb.wait();
        ADD_FAILURE() << c.name << ": no error on rank " << rank;
      } catch (const Mismatch& m) {
        EXPECT_NE(std::string(m.what()).find(c.expect), std::string::npos)
            << "rank " << rank << " got: " << m.what();
        EXPECT_NE(std::string(m.what()).find("bad_" + c.name), std::string::npos);
      }
      hg.wait();
      EXPECT_FLOAT_EQ(good[4], 2.0f);
    });
  }
}

// Horovod's CPU/GPU mismatch: one rank passes a CPU tensor, another a CUDA
// one. Negotiation refuses it on every rank before anything is executed,
// so host memory tagged as CUDA is enough here (no GPU is touched).
TEST(Mismatch, CpuOnOneRankCudaOnAnotherFailsOnEveryRank) {
  if (!KOLO_WITH_CUDA) GTEST_SKIP() << "build without CUDA refuses CUDA tensors at enqueue";
  for (int cudaRank : {0, 1}) {
    spawn(2, [&](int rank, Engine& engine) {
      std::vector<float> bad(4, 1.0f), good(5, 1.0f);
      Request q = makeRequest("mixed", OpType::kAllreduce, DataType::kFloat32, {4});
      if (rank == cudaRank) {
        q.device = DeviceKind::kCuda;
        q.deviceIndex = 0;
      }
      Handle hb = engine.enqueue(q, Entry{bad.data(), bad.data(), {}, {}});
      Handle hg = engine.enqueue(makeRequest("good", OpType::kAllreduce, DataType::kFloat32, {5}),
                                 Entry{good.data(), good.data(), {}, {}});
      try {
        hb.wait();
        ADD_FAILURE() << "no error on rank " << rank;
      } catch (const Mismatch& m) {
        const std::string first = cudaRank == 0 ? "cuda" : "cpu";
        const std::string second = cudaRank == 0 ? "cpu" : "cuda";
        EXPECT_NE(std::string(m.what()).find(
                      "tensor 'mixed': ranks disagree on the device (pass the tensor on the "
                      "same kind of device on every rank): rank 0 sent a " + first +
                      " tensor, rank 1 sent a " + second + " tensor"),
                  std::string::npos)
            << "rank " << rank << " got: " << m.what();
      }
      hg.wait();  // the job goes on
      EXPECT_FLOAT_EQ(good[4], 2.0f);
      EXPECT_FLOAT_EQ(bad[0], 1.0f);  // untouched
    });
  }
}

TEST(Names, DuplicateNameInFlightIsRefusedAtEnqueue) {
  // Rank 1 submits only after rank 0's second try, so rank 0's first 'dup'
  // is surely still in flight then (it cannot complete without rank 1).
  std::atomic<bool> tried{false};
  spawn(2, [&](int rank, Engine& engine) {
    std::vector<float> a(4, 1.0f), b(4, 1.0f);
    Entry ea{a.data(), a.data(), {}, {}};
    Entry eb{b.data(), b.data(), {}, {}};
    Handle h;
    if (rank == 0) {
      h = engine.enqueue(makeRequest("dup", OpType::kAllreduce, DataType::kFloat32, {4}), ea);
      try {
        engine.enqueue(makeRequest("dup", OpType::kAllreduce, DataType::kFloat32, {4}), eb);
        ADD_FAILURE() << "second enqueue of 'dup' was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("duplicate name 'dup'"), std::string::npos) << e.what();
      }
      tried = true;
    } else {
      while (!tried) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      h = engine.enqueue(makeRequest("dup", OpType::kAllreduce, DataType::kFloat32, {4}), ea);
    }
    h.wait();
    EXPECT_FLOAT_EQ(a[0], 2.0f);
    // Once complete, the name can be used again.
    engine.enqueue(makeRequest("dup", OpType::kAllreduce, DataType::kFloat32, {4}), eb).wait();
  });
}

TEST(Names, GroupRepeatingANameIsRefusedWholeAndReservesNothing) {
  spawn(2, [&](int, Engine& engine) {
    std::vector<float> a(4, 1.0f), b(4, 1.0f), c(4, 1.0f);
    auto req = [](const std::string& name) {
      return makeRequest(name, OpType::kAllreduce, DataType::kFloat32, {4});
    };
    try {
      engine.enqueueGroup({req("g.a"), req("g.b"), req("g.a")},
                          {Entry{a.data(), a.data(), {}, {}}, Entry{b.data(), b.data(), {}, {}},
                           Entry{c.data(), c.data(), {}, {}}});
      ADD_FAILURE() << "a group naming 'g.a' twice was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("duplicate name 'g.a'"), std::string::npos)
          << e.what();
    }
    // The names the refused group had reserved before the repeat are free.
    auto hs = engine.enqueueGroup({req("g.a"), req("g.b")}, {Entry{a.data(), a.data(), {}, {}},
                                                             Entry{b.data(), b.data(), {}, {}}});
    waitAll(hs);
    EXPECT_FLOAT_EQ(a[0], 2.0f);
    EXPECT_FLOAT_EQ(b[3], 2.0f);
  });
}

TEST(Groups, GroupIsNegotiatedAsAUnit) {
  spawn(3, [&](int rank, Engine& engine) {
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> bufs(4, std::vector<float>(10, 1.0f + rank));
      std::vector<Request> reqs;
      std::vector<Entry> entries;
      for (int k = 0; k < 4; ++k) {
        reqs.push_back(makeRequest("grp" + std::to_string(k), OpType::kAllreduce,
                                   DataType::kFloat32, {10}, ReduceOp::kAverage));
        entries.push_back(Entry{bufs[k].data(), bufs[k].data(), {}, {}});
      }
      auto hs = engine.enqueueGroup(reqs, entries);
      waitAll(hs);
      for (auto& b : bufs) ASSERT_FLOAT_EQ(b[9], 2.0f);
    }
  });
}

TEST(Join, AllreduceAllgatherBroadcastContinueWhileRanksJoin) {
  const int size = 3;
  for (int early = 0; early < size; ++early) {
    spawn(size, [&](int rank, Engine& engine) {
      // every rank does 2 steps; rank `early` then joins while the others do a third
      int steps = rank == early ? 2 : 3;
      for (int step = 0; step < steps; ++step) {
        std::vector<float> v(6, 1.0f);
        engine.enqueue(makeRequest("j", OpType::kAllreduce, DataType::kFloat32, {6}),
                       Entry{v.data(), v.data(), {}, {}}).wait();
        float expect = step < 2 ? 3.0f : 2.0f;  // joined rank contributes zero
        ASSERT_FLOAT_EQ(v[0], expect) << "step " << step;
        if (step == 2) {
          std::vector<float> mx(2, -5.0f - rank);
          engine.enqueue(makeRequest("jmax", OpType::kAllreduce, DataType::kFloat32, {2},
                                     ReduceOp::kMax), Entry{mx.data(), mx.data(), {}, {}}).wait();
          int maxLive = early == 0 ? 1 : 0;
          ASSERT_FLOAT_EQ(mx[0], -5.0f - maxLive) << "joined rank must not win max";
          std::vector<float> row(2, static_cast<float>(rank));
          std::vector<float> out;
          Entry ge;
          ge.input = row.data();
          ge.allocate = [&](const std::vector<int64_t>& shape) {
            out.resize(static_cast<size_t>(numElements(shape)));
            return static_cast<void*>(out.data());
          };
          Handle gh = engine.enqueue(makeRequest("jgather", OpType::kAllgather, DataType::kFloat32, {1, 2}), ge);
          gh.wait();
          ASSERT_EQ(gh.outputShape()[0], size - 1) << "joined rank contributes no rows";
          int root = early == 0 ? 1 : 0;
          std::vector<float> b(3, static_cast<float>(rank));
          Request bq = makeRequest("jbcast", OpType::kBroadcast, DataType::kFloat32, {3});
          bq.root = root;
          engine.enqueue(bq, Entry{b.data(), b.data(), {}, {}}).wait();
          ASSERT_FLOAT_EQ(b[2], static_cast<float>(root));
        }
      }
      Handle j = engine.join();
      j.wait();
      int last = j.joinResult();
      EXPECT_NE(last, early) << "the early rank cannot be the last to join";
      EXPECT_GE(last, 0);
      // After everyone joined, normal operation resumes.
      std::vector<float> v(2, 1.0f);
      engine.enqueue(makeRequest("after", OpType::kAllreduce, DataType::kFloat32, {2}),
                     Entry{v.data(), v.data(), {}, {}}).wait();
      EXPECT_FLOAT_EQ(v[0], 3.0f);
    });
  }
}

TEST(Barrier, CompletesOnlyWhenEveryRankArrives) {
  std::atomic<int> arrived{0};
  spawn(4, [&](int rank, Engine& engine) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30 * rank));
    arrived++;
    engine.barrier().wait();
    EXPECT_EQ(arrived.load(), 4);
  });
}

TEST(Latency, LoneSmallOpDoesNotWaitForTheCycle) {
  Config config = testConfig();
  config.cycleTime = std::chrono::milliseconds(200);
  spawn(2, [&](int, Engine& engine) {
    float x = 1.0f;
    engine.enqueue(makeRequest("warm", OpType::kAllreduce, DataType::kFloat32, {1}),
                   Entry{&x, &x, {}, {}}).wait();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) {
      engine.enqueue(makeRequest("lat", OpType::kAllreduce, DataType::kFloat32, {1}),
                     Entry{&x, &x, {}, {}}).wait();
    }
    auto elapsed = std::chrono::steady_clock::now() - start;
    // 20 ops at a 200 ms cycle would take 4 s if each waited a cycle.
    EXPECT_LT(elapsed, std::chrono::milliseconds(2000));
  }, config);
}

}  // namespace
}  // namespace kolo::test
