// Requests made by another API's calls (Request::call: the c10d backend's
// torch.distributed calls, named by their place in the sequence): ranks
// must agree on the call, alltoall receivers on what they expect, and
// errors and stall reports describe each rank's call.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/ops_util.h"
#include "harness/harness.h"
#include "negotiation/stall_inspector.h"

namespace kolo::test {
namespace {

Config callConfig() {
  Config config = testConfig();
  config.cacheCapacity = 0;  // calls are named anew each time
  return config;
}

Request callRequest(const std::string& name, const std::string& call, OpType op,
                    std::vector<int64_t> shape) {
  Request q = makeRequest(name, op, DataType::kFloat32, std::move(shape));
  q.call = call;
  return q;
}

std::string failureOf(const Handle& h) {
  try {
    h.wait();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Calls, DifferentCallsAtOnePointFailOnEveryRankNamingBothCalls) {
  spawn(2, [](int rank, Engine& engine) {
    std::vector<float> v(4, 1.0f);
    Request q = rank == 0 ? callRequest("pg #7", "all_reduce(op=SUM)", OpType::kAllreduce, {4})
                          : callRequest("pg #7", "broadcast(src=0)", OpType::kBroadcast, {4});
    const std::string error = failureOf(engine.enqueue(q, Entry{v.data(), v.data(), {}, {}}));
    EXPECT_NE(error.find("pg #7: ranks made different calls (they differ in the call): rank 0 "
                         "called all_reduce(op=SUM) on float32[4], rank 1 called "
                         "broadcast(src=0) on float32[4]"),
              std::string::npos)
        << "rank " << rank << ": " << error;
    // The next call goes through: the sequence is in step again.
    Handle ok = engine.enqueue(callRequest("pg #8", "all_reduce(op=SUM)", OpType::kAllreduce, {4}),
                               Entry{v.data(), v.data(), {}, {}});
    ok.wait();
    EXPECT_FLOAT_EQ(v[0], 2.0f);
  }, callConfig());
}

TEST(Calls, TheSameCallOnDifferentTensorsNamesBothTensors) {
  spawn(3, [](int rank, Engine& engine) {
    std::vector<float> v(5, 1.0f);
    const int64_t n = rank == 2 ? 5 : 4;
    const std::string error = failureOf(
        engine.enqueue(callRequest("pg #0", "all_reduce(op=SUM)", OpType::kAllreduce, {n}),
                       Entry{v.data(), v.data(), {}, {}}));
    EXPECT_NE(error.find("(they differ in shape): rank 0 called all_reduce(op=SUM) on "
                         "float32[4], rank 2 called all_reduce(op=SUM) on float32[5]"),
              std::string::npos)
        << "rank " << rank << ": " << error;
  }, callConfig());
}

TEST(Calls, AnAlltoallReceiverExpectingOtherRowsFailsBeforeAnythingMoves) {
  spawn(2, [](int rank, Engine& engine) {
    std::vector<float> in(4, static_cast<float>(rank + 1));
    std::vector<float> out(8, -1.0f);
    auto into = [&](const std::vector<int64_t>&) -> void* { return out.data(); };
    Request q = callRequest("pg #3", "all_to_all_single", OpType::kAlltoall, {4});
    q.splits = {2, 2};
    // Rank 1 expects 3 rows from rank 0, which sends it 2.
    q.recvSplits = rank == 0 ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{3, 1};
    const std::string error = failureOf(engine.enqueue(q, Entry{in.data(), nullptr, into, {}}));
    EXPECT_NE(error.find("pg #3: rank 1 expects 3 rows from rank 0, which sends 2: rank 1 called "
                         "all_to_all_single on float32[4] sending rows [2,2] receiving rows "
                         "[3,1], rank 0 called all_to_all_single on float32[4] sending rows "
                         "[2,2] receiving rows [2,2]"),
              std::string::npos)
        << "rank " << rank << ": " << error;
    EXPECT_FLOAT_EQ(out[0], -1.0f);
    // Agreeing receivers get their rows.
    q.name = "pg #4";
    q.recvSplits = {2, 2};
    engine.enqueue(q, Entry{in.data(), nullptr, into, {}}).wait();
    EXPECT_FLOAT_EQ(out[0], 1.0f);
    EXPECT_FLOAT_EQ(out[3], 2.0f);
  }, callConfig());
}

TEST(Calls, RankNamesNameTheRanksTheProgramKnows) {
  Config config = callConfig();
  config.rankNames = {3, 7};
  spawn(2, [](int rank, Engine& engine) {
    std::vector<float> v(4, 1.0f);
    const std::string error = failureOf(engine.enqueue(
        callRequest("p2p #0", "send/recv(src=3, dst=7, tag=0)", OpType::kBroadcast,
                    {rank == 0 ? 4 : 2}),
        Entry{v.data(), v.data(), {}, {}}));
    EXPECT_NE(error.find("rank 3 called send/recv(src=3, dst=7, tag=0) on float32[4], rank 7 "
                         "called send/recv(src=3, dst=7, tag=0) on float32[2]"),
              std::string::npos)
        << error;
  }, config);
}

TEST(Calls, NeedAnEngineWithoutResponseCache) {
  spawn(1, [](int, Engine& engine) {
    std::vector<float> v(4, 1.0f);
    EXPECT_THROW(engine.enqueue(callRequest("x", "all_reduce(op=SUM)", OpType::kAllreduce, {4}),
                                Entry{v.data(), v.data(), {}, {}}),
                 InvalidArgument);
    Request q = makeRequest("y", OpType::kAllreduce, DataType::kFloat32, {4});
    q.recvSplits = {4};
    EXPECT_THROW(engine.enqueue(q, Entry{v.data(), v.data(), {}, {}}), InvalidArgument);
  });
}

TEST(StallInspector, CallsAreReportedAsCallsNotMadeByTheMissingRanks) {
  Config config;
  config.stallCheckTime = std::chrono::milliseconds(1000);
  config.stallShutdownTime = std::chrono::milliseconds(30000);
  config.stallShutdownSetting = "the process group's timeout";
  Identity id;
  id.size = 3;
  StallInspector inspector(config, id);
  std::vector<std::vector<PendingAge>> perRank = {
      {{"process group 0 #54", 31000, "all_reduce(op=SUM) on float32[4]"}},
      {{"process group 0 #54", 2000, "all_reduce(op=SUM) on float32[4]"}},
      {}};
  StallReport report = inspector.analyze(perRank, {false, false, false});
  EXPECT_NE(report.warning.find("1 call(s) made by some ranks but not by others"),
            std::string::npos)
      << report.warning;
  EXPECT_NE(report.warning.find("process group 0 #54: all_reduce(op=SUM) on float32[4], not "
                                "called by ranks [2] (called by ranks [0, 1], waiting 31.0 s)"),
            std::string::npos)
      << report.warning;
  EXPECT_TRUE(report.shutdown);
  EXPECT_NE(report.shutdownMessage.find("(the process group's timeout)"), std::string::npos)
      << report.shutdownMessage;
  auto back = wire::decodePending(wire::encode(perRank[0]));
  EXPECT_EQ(back[0].what, "all_reduce(op=SUM) on float32[4]");
}

}  // namespace
}  // namespace kolo::test
