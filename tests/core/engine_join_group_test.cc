// Join with every operation (each with its neutral contribution, also when
// the response comes from the cache) and grouped allgather/reducescatter,
// through real engines, ranks as threads.
#include <gtest/gtest.h>

#include <numeric>

#include "core/ops_util.h"
#include "harness/harness.h"

namespace kolo::test {
namespace {

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

TEST(Join, EveryOperationGoesOnWithTheJoinedRanksNeutralContribution) {
  const int size = 3;
  for (int early : {0, 2}) {
    SCOPED_TRACE("rank " + std::to_string(early) + " joins early");
    spawn(size, [&](int rank, Engine& engine) {
      const std::vector<int> active = early == 0 ? std::vector<int>{1, 2}
                                                 : std::vector<int>{0, 1};
      if (rank == early) {
        Handle j = engine.join();
        j.wait();
        EXPECT_NE(j.joinResult(), early);
        engine.barrier().wait();
        return;
      }
      // Twice each: negotiated, then answered from the cache (where the
      // joined rank runs responses for ops it never submitted).
      for (int step = 0; step < 2; ++step) {
        // reducescatter: the joined rank adds zeros (sum) and drops its share.
        std::vector<float> rin(6), rout;
        for (int i = 0; i < 6; ++i) rin[i] = static_cast<float>(10 * rank + i);
        engine.enqueue(makeRequest("rs", OpType::kReducescatter, DataType::kFloat32, {6}),
                       negotiated(rin, rout))
            .wait();
        ASSERT_EQ(rout.size(), 2u);
        for (int i = 0; i < 2; ++i) {
          const int row = 2 * rank + i;
          float expect = 0;
          for (int a : active) expect += static_cast<float>(10 * a + row);
          EXPECT_FLOAT_EQ(rout[i], expect) << "step " << step;
        }
        // reducescatter with max: the joined rank's identity is the lowest value.
        std::vector<float> mxin(3, -100.0f - rank), mxout;
        engine.enqueue(makeRequest("rsmax", OpType::kReducescatter, DataType::kFloat32, {3},
                                   ReduceOp::kMax),
                       negotiated(mxin, mxout))
            .wait();
        EXPECT_FLOAT_EQ(mxout[0], -100.0f - active[0]);
        // broadcast from an active rank
        std::vector<float> b(3, static_cast<float>(rank));
        Request bq = makeRequest("bc", OpType::kBroadcast, DataType::kFloat32, {3});
        bq.root = active[1];
        engine.enqueue(bq, Entry{b.data(), b.data(), {}, {}}).wait();
        EXPECT_FLOAT_EQ(b[0], static_cast<float>(active[1]));
        // allgather: no rows from the joined rank
        std::vector<float> gin(2, static_cast<float>(rank)), gout;
        Handle gh = engine.enqueue(
            makeRequest("ag", OpType::kAllgather, DataType::kFloat32, {1, 2}),
            negotiated(gin, gout));
        gh.wait();
        EXPECT_EQ(gout, (std::vector<float>{static_cast<float>(active[0]),
                                            static_cast<float>(active[0]),
                                            static_cast<float>(active[1]),
                                            static_cast<float>(active[1])}));
        std::vector<int64_t> rows(size, 1);
        rows[early] = 0;
        EXPECT_EQ(gh.receivedSplits(), rows);
        // alltoall: one row to every rank; the joined rank sends none, and
        // the row sent to it is dropped.
        std::vector<float> ain(3), aout;
        for (int j = 0; j < 3; ++j) ain[j] = static_cast<float>(10 * rank + j);
        Request aq = makeRequest("a2a", OpType::kAlltoall, DataType::kFloat32, {3});
        Handle ah = engine.enqueue(aq, negotiated(ain, aout));
        ah.wait();
        EXPECT_EQ(ah.receivedSplits(), rows);
        EXPECT_EQ(aout, (std::vector<float>{static_cast<float>(10 * active[0] + rank),
                                            static_cast<float>(10 * active[1] + rank)}));
      }
      engine.join().wait();
      engine.barrier().wait();
    });
  }
}

TEST(Join, GroupsAndProcessSetsTakeJoinedRanksToo) {
  spawnWithSets(3, {{0, 1}}, [&](int rank, Engine& engine) {
    if (rank == 2) {
      engine.barrier().wait();
      return;
    }
    if (rank == 1) {
      engine.join(1).wait();
      engine.barrier().wait();
      return;
    }
    std::vector<float> a(4, 1.0f), b(2, 2.0f), outA, outB;
    std::vector<Request> qs = {
        makeRequest("g.a", OpType::kReducescatter, DataType::kFloat32, {4}),
        makeRequest("g.b", OpType::kReducescatter, DataType::kFloat32, {2})};
    for (auto& q : qs) q.processSet = 1;
    std::vector<Entry> es = {negotiated(a, outA), negotiated(b, outB)};
    auto hs = engine.enqueueGroup(qs, es);
    for (auto& h : hs) h.wait();
    EXPECT_EQ(outA, (std::vector<float>{1.0f, 1.0f}));  // rank 1 (joined) adds zeros
    EXPECT_EQ(outB, (std::vector<float>{2.0f}));
    engine.join(1).wait();
    engine.barrier().wait();
  });
}

TEST(Groups, GroupedAllgatherAndReducescatterNegotiateAsAUnit) {
  for (int size : {2, 3}) {
    spawn(size, [&](int rank, Engine& engine) {
      // allgather: tensor k has (rank + k) rows of 2
      std::vector<std::vector<float>> in(3), out(3);
      std::vector<Request> qs;
      std::vector<Entry> es;
      for (int k = 0; k < 3; ++k) {
        in[k].assign(static_cast<size_t>((rank + k) * 2), static_cast<float>(10 * k + rank));
        qs.push_back(makeRequest("gag." + std::to_string(k), OpType::kAllgather,
                                 DataType::kFloat32, {rank + k, 2}));
        es.push_back(negotiated(in[k], out[k]));
      }
      auto hs = engine.enqueueGroup(qs, es);
      for (int k = 0; k < 3; ++k) {
        hs[k].wait();
        std::vector<float> expect;
        for (int r = 0; r < size; ++r) expect.insert(expect.end(), (r + k) * 2, 10.0f * k + r);
        EXPECT_EQ(out[k], expect) << "tensor " << k;
      }
      // reducescatter: 2 tensors, averaged
      std::vector<std::vector<float>> rin = {std::vector<float>(2 * size, 1.0f + rank),
                                             std::vector<float>(size + 1, 2.0f * rank)};
      std::vector<std::vector<float>> rout(2);
      std::vector<Request> rq = {
          makeRequest("grs.0", OpType::kReducescatter, DataType::kFloat32, {2 * size},
                      ReduceOp::kAverage),
          makeRequest("grs.1", OpType::kReducescatter, DataType::kFloat32, {size + 1},
                      ReduceOp::kAverage)};
      std::vector<Entry> re = {negotiated(rin[0], rout[0]), negotiated(rin[1], rout[1])};
      for (int step = 0; step < 2; ++step) {  // the second from the cache
        auto rh = engine.enqueueGroup(rq, re);
        for (auto& h : rh) h.wait();
        const float mean0 = 1.0f + (size - 1) / 2.0f;
        const float mean1 = static_cast<float>(size - 1);
        EXPECT_EQ(rout[0], std::vector<float>(2, mean0));
        EXPECT_EQ(rout[1], std::vector<float>(rank == 0 ? 2 : 1, mean1));
      }
      // A group holds one kind of operation.
      std::vector<Request> mixed = {qs[0], rq[0]};
      std::vector<Entry> mixedEntries = {es[0], re[0]};
      EXPECT_THROW(engine.enqueueGroup(mixed, mixedEntries), InvalidArgument);
      // Broadcasts cannot be grouped.
      Request bq = makeRequest("gb", OpType::kBroadcast, DataType::kFloat32, {1});
      std::vector<float> bv(1);
      EXPECT_THROW(engine.enqueueGroup({bq}, {Entry{bv.data(), bv.data(), {}, {}}}),
                   InvalidArgument);
    });
  }
}

}  // namespace
}  // namespace kolo::test
