// The neutral layer every adapter submits through (kolo/tensor.h) and the
// engine's operation names (Engine::nameOrNext), on real engines of ranks as
// threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "kolo/tensor.h"

namespace kolo::test {
namespace {

TensorRef floats(const std::vector<float>& values) {
  TensorRef t = hostTensor(DataType::kFloat32, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), static_cast<float*>(t.data));
  return t;
}

std::vector<float> valuesOf(const TensorRef& t) {
  const auto* p = static_cast<const float*>(t.data);
  return std::vector<float>(p, p + t.numel());
}

TEST(OperationNames, UnnamedCallsCountPerSetAndOpAndEveryRankAgrees) {
  spawnWithSets(3, {{0, 1}}, [](int rank, Engine& engine) {
    EXPECT_EQ(engine.nameOrNext("", "allreduce"), "noname.allreduce.0");
    EXPECT_EQ(engine.nameOrNext("", "allreduce"), "noname.allreduce.1");
    EXPECT_EQ(engine.nameOrNext("", "allgather"), "noname.allgather.0");
    EXPECT_EQ(engine.nameOrNext("", "allreduce", 1), "noname.allreduce.ps1.0");
    EXPECT_EQ(engine.nameOrNext("given", "allreduce"), "given") << "a name is kept";
    EXPECT_EQ(engine.nameOrNext("", "allreduce"), "noname.allreduce.2")
        << "a given name draws no number";
    engine.resetNames();
    EXPECT_EQ(engine.nameOrNext("", "allreduce"), "noname.allreduce.0");
    // Unnamed ops submitted through the counters match across ranks.
    TensorRef t = floats({1.0f * rank, 2.0f});
    submit(engine, allreduceRequest(engine.nameOrNext("", "allreduce"), ReduceOp::kSum), t)
        .handle()
        .wait();
    EXPECT_EQ(valuesOf(t), (std::vector<float>{3.0f, 6.0f}));
  });
}

TEST(OperationNames, AnotherEngineCountsFromZero) {
  // An elastic reset makes a new engine: its names start again on every rank.
  for (int round = 0; round < 2; ++round) {
    spawn(2, [](int, Engine& engine) {
      EXPECT_EQ(engine.nameOrNext("", "broadcast"), "noname.broadcast.0");
    });
  }
}

TEST(TensorSubmission, InPlaceIntoAndNegotiatedOutputs) {
  spawn(2, [](int rank, Engine& engine) {
    TensorRef inPlace = floats({1.0f, 2.0f, 3.0f});
    TensorOp a = submit(engine, allreduceRequest("a", ReduceOp::kAverage), inPlace);
    TensorRef input = floats({float(rank), float(rank)});
    TensorRef out = hostTensor(DataType::kFloat32, {2});
    TensorOp b =
        submit(engine, broadcastRequest("b", /*root=*/1), input, OutputSpec::intoTensor(out));
    TensorRef rows = floats(std::vector<float>(static_cast<size_t>(rank + 1), float(rank)));
    TensorOp c = submit(engine, allgatherRequest("c"), rows,
                        OutputSpec::negotiated(hostAllocator(DataType::kFloat32)));
    a.handle().wait();
    b.handle().wait();
    c.handle().wait();
    EXPECT_EQ(valuesOf(a.output()), (std::vector<float>{1.0f, 2.0f, 3.0f}));
    EXPECT_EQ(a.output().data, inPlace.data) << "in place";
    EXPECT_EQ(valuesOf(b.output()), (std::vector<float>{1.0f, 1.0f}));
    EXPECT_EQ(b.output().data, out.data);
    EXPECT_EQ(valuesOf(input), (std::vector<float>{float(rank), float(rank)}))
        << "the input of an op with its own output is untouched";
    EXPECT_EQ(c.output().shape, (std::vector<int64_t>{3}));
    EXPECT_EQ(valuesOf(c.output()), (std::vector<float>{0.0f, 1.0f, 1.0f}));
  });
}

TEST(TensorSubmission, TheEngineHoldsTheMemoryUntilItIsDoneAndThenDropsIt) {
  spawn(2, [](int, Engine& engine) {
    std::weak_ptr<void> memory;
    bool doneRan = false;
    {
      TensorRef t = floats({1.0f});
      memory = t.keepAlive;
      TensorCallbacks callbacks;
      callbacks.onDone = [&doneRan](const Status& s) {
        EXPECT_TRUE(s.ok()) << s.message;
        doneRan = true;
      };
      Handle h = submit(engine, allreduceRequest("held"), std::move(t), OutputSpec::inPlace(),
                        std::move(callbacks))
                     .handle();
      h.wait();
    }
    EXPECT_TRUE(doneRan);
    EXPECT_TRUE(memory.expired()) << "nothing keeps the memory once the op and its refs are gone";
  });
}

TEST(TensorSubmission, AGroupIsNegotiatedAsOneAndNamesItsMembers) {
  spawn(3, [](int rank, Engine& engine) {
    std::vector<Request> requests;
    std::vector<TensorRef> inputs;
    for (size_t i = 0; i < 3; ++i) {
      requests.push_back(allreduceRequest(groupMemberName("g", i), ReduceOp::kSum));
      inputs.push_back(floats({float(i + rank)}));
    }
    std::vector<TensorOp> ops = submitGroup(engine, requests, inputs);
    ASSERT_EQ(ops.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      ops[i].handle().wait();
      EXPECT_EQ(valuesOf(ops[i].output()), (std::vector<float>{float(3 * i + 3)}));
    }
    EXPECT_EQ(groupMemberName("g", 2), "g.2");
  });
}

TEST(TensorSubmission, BadInputIsNamed) {
  spawn(1, [](int, Engine& engine) {
    TensorRef t;
    t.shape = {4};  // elements but no data
    try {
      submit(engine, allreduceRequest("nodata"), t);
      ADD_FAILURE() << "accepted a tensor without data";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'nodata': the tensor has elements but no data"),
                std::string::npos)
          << e.what();
    }
    TensorRef in = floats({1.0f, 2.0f});
    try {
      submit(engine, allreduceRequest("short"), in,
             OutputSpec::intoTensor(hostTensor(DataType::kFloat32, {1})));
      ADD_FAILURE() << "accepted an output of the wrong size";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("output must have the input's dtype, size and device"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(ObjectCollectives, BroadcastAndAllgatherBytesIncludingEmptyOnes) {
  spawn(3, [](int rank, Engine& engine) {
    const std::string mine = std::string(static_cast<size_t>(rank), 'a' + static_cast<char>(rank));
    EXPECT_EQ(broadcastObject(engine, rank == 2 ? "from two" : "", 2, "obj"), "from two");
    EXPECT_EQ(broadcastObject(engine, "", 0, "empty"), "");
    const std::vector<std::string> all = allgatherObject(engine, mine, "all");
    EXPECT_EQ(all, (std::vector<std::string>{"", "b", "cc"}));
  });
}

}  // namespace
}  // namespace kolo::test
