// Bad input catalogue, process-level API (kolo/kolo.h): calls before
// kolo::init(), after kolo::shutdown(), a second init(), and an init() that
// fails on a malformed KOLO_* value. No launcher: the job has size 1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>

#include "kolo/error.h"
#include "kolo/kolo.h"

namespace kolo {
namespace {

const char kNotInitialized[] =
    "kolo::init() has not been called (or kolo::shutdown() already was); call kolo::init() first";

void expectInvalid(const std::function<void()>& fn, const std::string& message) {
  try {
    fn();
    ADD_FAILURE() << "expected InvalidArgument: " << message;
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(ApiLifecycle, CallsBeforeInitNameTheFix) {
  ASSERT_FALSE(isInitialized());
  expectInvalid([] { defaultEngine(); }, kNotInitialized);
  expectInvalid([] { rank(); }, kNotInitialized);
  expectInvalid([] { size(); }, kNotInitialized);
  expectInvalid([] { localRank(); }, kNotInitialized);
  shutdown();  // idempotent, also before init()
  EXPECT_FALSE(isInitialized());
}

TEST(ApiLifecycle, SecondInitAndCallsAfterShutdownFail) {
  init();
  ASSERT_TRUE(isInitialized());
  EXPECT_EQ(rank(), 0);
  EXPECT_EQ(size(), 1);
  expectInvalid([] { init(); },
                "kolo::init() was already called; call kolo::shutdown() first");
  Engine& engine = defaultEngine();
  float v = 2.0f;
  Request q;
  q.name = "x";
  q.shape = {1};
  engine.enqueue(q, Entry{&v, &v, {}, {}}).wait();
  EXPECT_EQ(v, 2.0f);
  shutdown();
  EXPECT_FALSE(isInitialized());
  expectInvalid([] { defaultEngine(); }, kNotInitialized);
  expectInvalid([] { crossRank(); }, kNotInitialized);
  shutdown();
  // init() works again after shutdown().
  init();
  EXPECT_EQ(size(), 1);
  shutdown();
}

TEST(ApiLifecycle, EngineRejectsWorkAfterShutdown) {
  init();
  Engine& engine = defaultEngine();
  engine.shutdown();
  float v = 1.0f;
  Request q;
  q.name = "late";
  q.shape = {1};
  try {
    engine.enqueue(q, Entry{&v, &v, {}, {}}).wait();
    ADD_FAILURE() << "enqueue after Engine::shutdown() succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kShutdown) << e.what();
    std::cout << "enqueue after shutdown: " << e.what() << std::endl;
  }
  shutdown();
}

TEST(ApiLifecycle, MalformedEnvFailsInitAndLeavesItUninitialized) {
  ASSERT_EQ(::setenv("KOLO_CYCLE_TIME", "fast", 1), 0);
  try {
    init();
    ADD_FAILURE() << "init() accepted KOLO_CYCLE_TIME=fast";
  } catch (const InvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("KOLO_CYCLE_TIME"), std::string::npos) << what;
    EXPECT_NE(what.find("fast"), std::string::npos) << what;
    std::cout << "malformed env: " << what << std::endl;
  }
  ::unsetenv("KOLO_CYCLE_TIME");
  EXPECT_FALSE(isInitialized());
  init();  // a failed init() leaves nothing behind
  EXPECT_TRUE(isInitialized());
  shutdown();
}

}  // namespace
}  // namespace kolo
