// Failure paths: a rank that throws, a rank that shuts down early, use after
// shutdown, and requests refused at enqueue. Everything must end with a
// clear error on every rank, never a hang.
#include <gtest/gtest.h>

#include <thread>

#include "core/ops_util.h"
#include "kolo/build_config.h"
#include "harness/harness.h"

namespace kolo::test {
namespace {

TEST(Failure, ARankThatThrowsFailsEveryOtherRankWithItsMessage) {
  auto store = makeHashStore();
  const int size = 3;
  std::vector<std::string> errors(size);
  runRanks(size, [&](int rank) {
    Engine engine(testConfig(), localIdentity(rank, size), store);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      engine.abort("CUDA out of memory (simulated)");
      return;
    }
    std::vector<float> v(4, 1.0f);
    Handle h = engine.enqueue(makeRequest("never", OpType::kAllreduce, DataType::kFloat32, {4}),
                              Entry{v.data(), v.data(), {}, {}});
    try {
      h.wait();
    } catch (const PeerFailure& e) {
      errors[rank] = e.what();
    }
    // Later operations fail the same way, at once.
    EXPECT_THROW(engine.enqueue(makeRequest("later", OpType::kAllreduce, DataType::kFloat32, {4}),
                                Entry{v.data(), v.data(), {}, {}}),
                 PeerFailure);
    EXPECT_EQ(engine.failure().code, ErrorCode::kPeerFailure);
  });
  for (int r : {0, 2}) {
    EXPECT_EQ(errors[r], "rank 1 failed: CUDA out of memory (simulated)") << "rank " << r;
  }
}

TEST(Failure, ShutdownOfOneRankFailsPendingOpsElsewhereNamingIt) {
  auto store = makeHashStore();
  runRanks(2, [&](int rank) {
    Engine engine(testConfig(), localIdentity(rank, 2), store);
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      engine.shutdown();
      EXPECT_TRUE(engine.failure().ok());
      return;
    }
    std::vector<float> v(4, 1.0f);
    Handle h = engine.enqueue(makeRequest("orphan", OpType::kAllreduce, DataType::kFloat32, {4}),
                              Entry{v.data(), v.data(), {}, {}});
    try {
      h.wait();
      ADD_FAILURE() << "op completed although rank 0 never submitted it";
    } catch (const ShutdownError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0 shut down"), std::string::npos) << e.what();
    }
  });
}

TEST(Failure, EnqueueAfterShutdownIsAClearError) {
  spawn(2, [&](int, Engine& engine) {
    engine.shutdown();
    float x = 0;
    try {
      engine.enqueue(makeRequest("x", OpType::kAllreduce, DataType::kFloat32, {1}),
                     Entry{&x, &x, {}, {}});
      ADD_FAILURE() << "enqueue after shutdown was accepted";
    } catch (const ShutdownError& e) {
      EXPECT_NE(std::string(e.what()).find("shut down"), std::string::npos);
    }
    engine.shutdown();  // idempotent
  });
}

TEST(Failure, AbortWithoutAMessageStillNamesTheRank) {
  // (A rank that dies without any goodbye is tested with real processes in
  // multiprocess_test.cc: SIGKILL and SIGSTOP.)
  auto store = makeHashStore();
  Config config = testConfig();
  config.timeout = std::chrono::seconds(5);
  std::string error;
  runRanks(2, [&](int rank) {
    if (rank == 1) {
      auto engine = std::make_unique<Engine>(config, localIdentity(1, 2), store);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      engine->abort("");
      return;
    }
    Engine engine(config, localIdentity(0, 2), store);
    std::vector<float> v(4, 1.0f);
    Handle h = engine.enqueue(makeRequest("lost", OpType::kAllreduce, DataType::kFloat32, {4}),
                              Entry{v.data(), v.data(), {}, {}});
    auto start = std::chrono::steady_clock::now();
    try {
      h.wait();
    } catch (const PeerFailure& e) {
      error = e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(7));
  });
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
}

TEST(BadInput, RefusedAtEnqueueWithTheReason) {
  spawn(2, [&](int, Engine& engine) {
    std::vector<float> v(4, 1.0f);
    std::vector<int32_t> iv(4, 1);
    std::vector<uint8_t> bv(4, 1);
    auto expectInvalid = [&](Request q, Entry e, const std::string& text) {
      try {
        engine.enqueue(q, e);
        ADD_FAILURE() << "accepted: " << text;
      } catch (const InvalidArgument& err) {
        EXPECT_NE(std::string(err.what()).find(text), std::string::npos) << err.what();
      }
    };
    Entry ok{v.data(), v.data(), {}, {}};
    expectInvalid(makeRequest("", OpType::kAllreduce, DataType::kFloat32, {4}), ok,
                  "non-empty name");
    expectInvalid(makeRequest("kolo.x", OpType::kAllreduce, DataType::kFloat32, {4}), ok,
                  "reserved");
    expectInvalid(makeRequest("null", OpType::kAllreduce, DataType::kFloat32, {4}), Entry{},
                  "input pointer is null");
    Request b = makeRequest("root", OpType::kBroadcast, DataType::kFloat32, {4});
    b.root = 5;
    expectInvalid(b, ok, "root rank 5 is not a rank (size 2)");
    expectInvalid(makeRequest("boolavg", OpType::kAllreduce, DataType::kBool, {4}, ReduceOp::kAverage),
                  Entry{bv.data(), bv.data(), {}, {}}, "average is not defined for bool");
    Request bq = makeRequest("boolscale", OpType::kAllreduce, DataType::kBool, {4});
    bq.prescale = 0.5;
    expectInvalid(bq, Entry{bv.data(), bv.data(), {}, {}},
                  "prescale/postscale factors are not defined for bool tensors");
    Request iq = makeRequest("intadasum", OpType::kAllreduce, DataType::kInt32, {4},
                             ReduceOp::kAdasum);
    expectInvalid(iq, Entry{iv.data(), iv.data(), {}, {}},
                  "Adasum needs a floating-point tensor (float16, bfloat16, float32 or float64), "
                  "got int32");
    Request rq = makeRequest("rsadasum", OpType::kReducescatter, DataType::kFloat32, {4},
                             ReduceOp::kAdasum);
    Entry re{v.data(), nullptr,
             [&](const std::vector<int64_t>&) { return static_cast<void*>(v.data()); }, {}};
    expectInvalid(rq, re, "Adasum is an allreduce operation only");
    Request a = makeRequest("splits", OpType::kAlltoall, DataType::kFloat32, {4});
    a.splits = {1, 1};
    Entry ae{v.data(), nullptr, [&](const std::vector<int64_t>&) { return static_cast<void*>(v.data()); }, {}};
    expectInvalid(a, ae, "splits add up to 2 rows but the tensor has 4");
    expectInvalid(makeRequest("noalloc", OpType::kAllgather, DataType::kFloat32, {4}), ok,
                  "output allocator");
    Request neg = makeRequest("neg", OpType::kAllreduce, DataType::kFloat32, {-1});
    expectInvalid(neg, ok, "negative dimension");
    Request gpu = makeRequest("gpu", OpType::kAllreduce, DataType::kFloat32, {4});
    gpu.device = DeviceKind::kCuda;
    if (!KOLO_WITH_CUDA) expectInvalid(gpu, ok, "no CUDA support");
    gpu.reduceOp = ReduceOp::kAdasum;
    expectInvalid(gpu, ok, "Adasum of CUDA tensors is not supported yet");
  });
}

}  // namespace
}  // namespace kolo::test
