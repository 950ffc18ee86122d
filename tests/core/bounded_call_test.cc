// callWithin (common/bounded_call.h): how kolo calls a library's abort
// that may hang (ncclCommAbort in some NCCL versions) without hanging its
// own shutdown. A call that never returns by itself is left behind within
// the limit; one that returns, or throws, is waited for.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>

#include "common/bounded_call.h"

namespace kolo {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Far above what a loaded machine needs for a call that returns at once.
constexpr auto kLimit = 30s;

TEST(CallWithin, AHangingCallIsLeftBehindAtTheLimit) {
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = release->get_future().share();
  auto finished = std::make_shared<std::promise<void>>();
  std::future<void> helperDone = finished->get_future();
  const auto start = Clock::now();
  const bool returned = callWithin(100ms, [released, finished] {
    released.wait();  // hangs until the test lets it go, as a stuck abort would
    finished->set_value();
  });
  const auto waited = Clock::now() - start;
  EXPECT_FALSE(returned);
  EXPECT_GE(waited, 100ms);
  EXPECT_LT(waited, kLimit);
  // Left behind, not cancelled: it still runs to the end once it can.
  release->set_value();
  EXPECT_EQ(helperDone.wait_for(kLimit), std::future_status::ready);
}

TEST(CallWithin, ACallThatReturnsIsWaitedFor) {
  std::atomic<bool> ran{false};
  EXPECT_TRUE(callWithin(kLimit, [&ran] { ran = true; }));
  EXPECT_TRUE(ran.load());
}

TEST(CallWithin, ACallThatThrowsCountsAsReturned) {
  EXPECT_TRUE(callWithin(kLimit, [] { throw std::runtime_error("abort failed"); }));
}

}  // namespace
}  // namespace kolo
