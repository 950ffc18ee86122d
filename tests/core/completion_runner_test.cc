// CompletionRunner: tasks run off the caller's thread, a task may wait for
// one posted after it (another thread starts), and the destructor waits
// for every thread.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "kolo/completion_runner.h"

namespace kolo {
namespace {

TEST(CompletionRunner, ATaskMayWaitForOnePostedAfterIt) {
  std::promise<void> secondRan;
  std::promise<std::thread::id> firstDone;
  {
    CompletionRunner runner;
    auto second = secondRan.get_future().share();
    runner.post([&firstDone, second] {
      // Blocks until the next task ran: that one needs another thread.
      const bool ran = second.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
      firstDone.set_value(ran ? std::this_thread::get_id() : std::thread::id());
    });
    runner.post([&secondRan] { secondRan.set_value(); });
    auto done = firstDone.get_future();
    ASSERT_EQ(done.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    const std::thread::id ranOn = done.get();
    EXPECT_NE(ranOn, std::thread::id()) << "the second task never ran while the first waited";
    EXPECT_NE(ranOn, std::this_thread::get_id());
    EXPECT_GE(runner.threads(), 2);
    runner.post([] { throw 1; });  // ignored
  }                                // the destructor waits for both threads
}

}  // namespace
}  // namespace kolo
