// Failure behaviour every backend must have: a rank that goes away makes its
// peers fail promptly (PeerFailure, or Timeout at worst) instead of hanging;
// a silent peer is a Timeout; a failed backend keeps failing at once.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/conformance.h"
#include "kolo/error.h"

namespace kolo::test {
namespace {

using Clock = std::chrono::steady_clock;

Config failureConfig(std::chrono::milliseconds timeout) {
  Config config = commConfig();
  config.timeout = timeout;
  return config;
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Outcome of an operation expected to fail, as seen on one rank.
struct Outcome {
  bool threw = false;
  ErrorCode code = ErrorCode::kOk;
  std::string message;
  double seconds = 0;
};

template <typename Fn>
Outcome expectFailure(Fn&& fn) {
  Outcome outcome;
  const auto start = Clock::now();
  try {
    fn();
  } catch (const Error& e) {
    outcome.threw = true;
    outcome.code = e.code();
    outcome.message = e.what();
  }
  outcome.seconds = secondsSince(start);
  return outcome;
}

// A one-shot gate between rank threads.
class Latch {
 public:
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

bool isPeerFailureOrTimeout(const Outcome& o) {
  return o.threw && (o.code == ErrorCode::kPeerFailure || o.code == ErrorCode::kTimeout);
}

// Rank `leaver` destroys its collectives while every other rank is blocked
// in an allreduce with it.
void destroyDuringAllreduce(const CommBackend& backend, int n, int leaver) {
  std::vector<Outcome> first(n), second(n);
  runWithArgs(
      n,
      [&](int rank, const comm::BackendArgs& args) {
        auto collectives = backend.createCollectives(args);
        if (rank == leaver) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          collectives.reset();
          return;
        }
        std::vector<float> buf(1027, 1.0f);
        first[rank] = expectFailure([&] {
          collectives->allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
        });
        second[rank] = expectFailure([&] {
          collectives->allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
        });
      },
      failureConfig(std::chrono::seconds(5)));
  for (int r = 0; r < n; ++r) {
    if (r == leaver) continue;
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + first[r].message);
    EXPECT_TRUE(isPeerFailureOrTimeout(first[r]));
    // The peer's connections closed: well before the 5 s timeout.
    EXPECT_EQ(first[r].code, ErrorCode::kPeerFailure);
    EXPECT_LT(first[r].seconds, 3.0);
    EXPECT_NE(first[r].message.find("allreduce"), std::string::npos);
    // Once failed, the backend fails again at once.
    EXPECT_TRUE(isPeerFailureOrTimeout(second[r])) << second[r].message;
    EXPECT_LT(second[r].seconds, 0.5);
  }
}

TEST_P(CommFailureConformance, PeerDestroyedDuringAllreduce) {
  destroyDuringAllreduce(backend(), 2, 1);
}

TEST_P(CommFailureConformance, PeerDestroyedDuringAllreduceOfThree) {
  destroyDuringAllreduce(backend(), 3, 2);
}

TEST_P(CommFailureConformance, PeerDestroyedDuringControlBarrier) {
  Outcome outcome;
  runWithArgs(
      2,
      [&](int rank, const comm::BackendArgs& args) {
        auto control = backend().createControlChannel(args);
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          return;  // destroys the channel
        }
        outcome = expectFailure([&] { control->barrier(); });
      },
      failureConfig(std::chrono::seconds(5)));
  EXPECT_TRUE(isPeerFailureOrTimeout(outcome)) << outcome.message;
  EXPECT_LT(outcome.seconds, 3.0) << outcome.message;
}

TEST_P(CommFailureConformance, SilentPeerTimesOut) {
  Outcome outcome;
  Latch done;
  runWithArgs(
      2,
      [&](int rank, const comm::BackendArgs& args) {
        auto collectives = backend().createCollectives(args);
        if (rank == 1) {
          done.wait();  // alive and connected, but never joins the allreduce
          return;
        }
        std::vector<int64_t> buf(7, 1);
        outcome = expectFailure([&] {
          collectives->allreduce(buf.data(), buf.size(), DataType::kInt64, ReduceOp::kSum);
        });
        done.open();
      },
      failureConfig(std::chrono::milliseconds(1000)));
  EXPECT_EQ(outcome.code, ErrorCode::kTimeout) << outcome.message;
  EXPECT_GE(outcome.seconds, 0.9);
  EXPECT_LT(outcome.seconds, 5.0);
}

TEST_P(CommFailureConformance, InvalidArgumentsDoNotBreakTheBackend) {
  runWithArgs(2, [&](int rank, const comm::BackendArgs& args) {
    auto collectives = backend().createCollectives(args);
    std::vector<float> buf(4, 1.0f);
    EXPECT_THROW(collectives->allgatherv(buf.data(), buf.data(), {1, 2, 3}, DataType::kFloat32),
                 InvalidArgument);
    EXPECT_THROW(collectives->broadcast(buf.data(), 4, DataType::kFloat32, 2), InvalidArgument);
    EXPECT_THROW(collectives->allreduce(buf.data(), 4, DataType::kFloat32, ReduceOp::kAverage),
                 InvalidArgument);
    collectives->allreduce(buf.data(), 4, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(buf[0], 2.0f) << "rank " << rank;
  });
}

}  // namespace
}  // namespace kolo::test
