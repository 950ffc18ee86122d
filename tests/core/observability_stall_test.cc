// Stall inspector: a rank that never submits a tensor (cached or not) gets
// one warning on every rank naming the tensor and the missing rank; with a
// shutdown time the job fails instead of hanging.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/ranks_text.h"
#include "core/ops_util.h"
#include "harness/harness.h"
#include "negotiation/stall_inspector.h"

namespace kolo::test {
namespace {

using Clock = std::chrono::steady_clock;

// Thread-safe capture of every rank's warnings through Config::logSink.
struct LogCapture {
  std::mutex mu;
  std::vector<std::string> lines;

  void install(Config& config) {
    config.logLevel = LogLevel::kWarning;
    config.logSink = [this](LogLevel level, const std::string& line) {
      if (level < LogLevel::kWarning) return;
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(line);
    };
  }
  std::vector<std::string> matching(const std::string& a, const std::string& b = "") {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::string> out;
    for (const auto& l : lines) {
      if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) out.push_back(l);
    }
    return out;
  }
  bool waitFor(const std::string& a, const std::string& b, size_t count,
               std::chrono::milliseconds limit) {
    auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (matching(a, b).size() >= count) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
};

Handle submit(Engine& engine, const std::string& name, std::vector<float>& v) {
  return engine.enqueue(
      makeRequest(name, OpType::kAllreduce, DataType::kFloat32, {static_cast<int64_t>(v.size())}),
      Entry{v.data(), v.data(), {}, {}});
}

// A job of thousands of ranks gets a line, not a page: lists longer than
// kRanksListedOneByOne fold runs of consecutive ranks.
TEST(RanksText, LongListsFoldIntoRangesShortOnesStayOneByOne) {
  EXPECT_EQ(ranksPhrase({1}), "rank 1");
  EXPECT_EQ(ranksPhrase({0, 1, 2}), "ranks 0, 1, 2");
  std::vector<int> all;
  for (int r = 1; r < 512; ++r) all.push_back(r);
  EXPECT_EQ(ranksPhrase(all), "ranks 1-511");
  std::vector<int> gaps;
  for (int r = 0; r < 512; ++r) {
    if (r <= 255 || r == 300 || r >= 302) gaps.push_back(r);
  }
  EXPECT_EQ(joinRanks(gaps), "0-255, 300, 302-511");
  EXPECT_EQ(joinRanks({0, 2, 4, 6, 8, 10, 12, 14, 16}), "0, 2, 4, 6, 8, 10, 12, 14, 16");
}

TEST(Stall, EveryRankWarnsOnceNamingTheTensorAndTheMissingRank) {
  for (bool cached : {false, true}) {
    SCOPED_TRACE(cached ? "cached tensor" : "new tensor");
    LogCapture logs;
    Config config = testConfig();
    config.stallCheckTime = std::chrono::milliseconds(400);
    logs.install(config);
    std::vector<double> seconds(3, 0);
    spawn(
        3,
        [&](int rank, Engine& engine) {
          std::vector<float> v(16, 1.0f);
          if (cached) {
            // Negotiated once, so "grad.7" is now announced only by cache bit.
            for (int s = 0; s < 2; ++s) submit(engine, "grad.7", v).wait();
          }
          engine.barrier().wait();
          auto start = Clock::now();
          Handle h;
          if (rank != 1) h = submit(engine, "grad.7", v);
          // Every rank (rank 1 too) logs the warning.
          ASSERT_TRUE(
              logs.waitFor("'grad.7' missing on ranks [1]", "", 3, std::chrono::seconds(10)));
          seconds[rank] = std::chrono::duration<double>(Clock::now() - start).count();
          std::this_thread::sleep_for(std::chrono::milliseconds(600));  // more check rounds
          if (rank == 1) h = submit(engine, "grad.7", v);               // late: the job goes on
          h.wait();
          EXPECT_FLOAT_EQ(v[0], cached ? 27.0f : 3.0f);
        },
        config);
    auto warnings = logs.matching("'grad.7' missing on ranks [1]");
    ASSERT_EQ(warnings.size(), 3u);  // one per rank, not one per check round
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(logs.matching("[kolo rank " + std::to_string(r) + "] [warning]",
                              "'grad.7' missing on ranks [1]")
                    .size(),
                1u)
          << "rank " << r;
      // Check time 0.4 s, checked every 0.1 s; generous for a loaded machine.
      EXPECT_GE(seconds[r], 0.35) << "rank " << r;
      EXPECT_LT(seconds[r], 3.0) << "rank " << r;
    }
    EXPECT_NE(warnings[0].find("submitted by ranks [0, 2]"), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[0].find("KOLO_STALL_CHECK_TIME"), std::string::npos) << warnings[0];
  }
}

TEST(Stall, ShutdownTimeFailsThePendingOpsOnEveryRankInsteadOfHanging) {
  LogCapture logs;
  Config config = testConfig();
  config.stallCheckTime = std::chrono::milliseconds(200);
  config.stallShutdownTime = std::chrono::milliseconds(600);
  logs.install(config);
  std::vector<std::string> errors(2);
  spawn(
      2,
      [&](int rank, Engine& engine) {
        std::vector<float> v(4, 1.0f);
        submit(engine, "warmup", v).wait();
        auto start = Clock::now();
        if (rank == 0) {
          try {
            submit(engine, "loss", v).wait();
            ADD_FAILURE() << "expected the stalled op to fail";
          } catch (const Timeout& e) {
            errors[rank] = e.what();
          }
          // Later ops fail at once with the same error.
          EXPECT_THROW(submit(engine, "after", v), Timeout);
        } else {
          while (engine.failure().ok() && Clock::now() - start < std::chrono::seconds(10)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          errors[rank] = engine.failure().message;
          EXPECT_EQ(engine.failure().code, ErrorCode::kTimeout);
        }
        double took = std::chrono::duration<double>(Clock::now() - start).count();
        EXPECT_GE(took, 0.55);
        EXPECT_LT(took, 5.0);
      },
      config);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("KOLO_STALL_SHUTDOWN_TIME"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("'loss' missing on ranks [1]"), std::string::npos) << errors[r];
  }
  EXPECT_EQ(logs.matching("'loss' missing on ranks [1]", "[warning]").size(), 2u);
}

TEST(Stall, ASetsStallEndsTheJobOnEveryRankNamingTheSet) {
  LogCapture logs;
  Config config = testConfig();
  config.stallCheckTime = std::chrono::milliseconds(200);
  config.stallShutdownTime = std::chrono::milliseconds(600);
  logs.install(config);
  std::vector<std::string> errors(3);
  spawnWithSets(
      3, {{0, 2}},
      [&](int rank, Engine& engine) {
        std::vector<float> v(4, 1.0f);
        auto start = Clock::now();
        if (rank == 0) {
          Request q = makeRequest("loss", OpType::kAllreduce, DataType::kFloat32, {4});
          q.processSet = 1;
          try {
            engine.enqueue(q, Entry{v.data(), v.data(), {}, {}}).wait();
            ADD_FAILURE() << "expected the stalled op to fail";
          } catch (const Timeout& e) {
            errors[rank] = e.what();
          }
        } else {
          // Rank 2 (in the set) never submits 'loss'; rank 1 is outside it.
          // Both learn that the job ended.
          while (engine.failure().ok() && Clock::now() - start < std::chrono::seconds(10)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          errors[rank] = engine.failure().message;
        }
        double took = std::chrono::duration<double>(Clock::now() - start).count();
        EXPECT_GE(took, 0.55);
        EXPECT_LT(took, 5.0);
      },
      config);
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[r].find("process set 1 (ranks 0,2): stalled for more than"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("'loss' missing on ranks [2] (submitted by ranks [0]"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
  // The warning went to the set's ranks only.
  EXPECT_EQ(logs.matching("process set 1 (ranks 0,2): stall:", "[warning]").size(), 2u);
}

TEST(Stall, EveryEngineOfAProcessChecksForStallsNotOnlyTheFirst) {
  // init(); shutdown(); init() in one process: the second engine warns too.
  LogCapture logs;
  Config config = testConfig();
  config.stallCheckTime = std::chrono::milliseconds(300);
  logs.install(config);
  auto store = makeHashStore();
  runRanks(2, [&](int rank) {
    {
      Engine first(config, localIdentity(rank, 2), store);
      std::vector<float> v(2, 1.0f);
      submit(first, "first", v).wait();
      first.shutdown();
    }
    Engine second(config, localIdentity(rank, 2), store);
    std::vector<float> v(2, 1.0f);
    Handle h;
    if (rank == 0) h = submit(second, "lonely", v);
    EXPECT_TRUE(logs.waitFor("'lonely' missing on ranks [1]", "[kolo rank " +
                                                                  std::to_string(rank) + "]",
                             1, std::chrono::seconds(10)))
        << "rank " << rank << " of the second engine never warned";
    if (rank == 1) h = submit(second, "lonely", v);
    h.wait();
    EXPECT_FLOAT_EQ(v[0], 2.0f);
    second.barrier().wait();
  });
}

TEST(Stall, CheckRoundsOnlyEveryCheckPeriodAndNoneWhenDisabled) {
  for (int checkMs : {0, 400}) {
    Config config = testConfig();
    config.stallCheckTime = std::chrono::milliseconds(checkMs);
    spawn(
        2,
        [&](int, Engine& engine) {
          auto start = Clock::now();  // the engine's loop started just before
          std::vector<float> v(4, 1.0f);
          for (int s = 0; s < 25; ++s) {  // about 0.5 s
            submit(engine, "x", v).wait();
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
          EngineStats st = engine.stats();
          const auto elapsedMs =
              std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
          if (checkMs == 0) {
            EXPECT_EQ(st.stallChecks, 0u);
          } else {
            // One round per 100 ms (a quarter of the check time), not per cycle.
            EXPECT_GE(st.stallChecks, 2u);
            EXPECT_LE(st.stallChecks, static_cast<uint64_t>(elapsedMs / 100 + 2));
            EXPECT_LT(st.stallChecks, st.cycles / 4);
          }
        },
        config);
  }
}

TEST(StallInspector, JoinedRanksAreNeverMissingAndAgesPickTheOldest) {
  Config config;
  config.stallCheckTime = std::chrono::milliseconds(1000);
  config.stallShutdownTime = std::chrono::milliseconds(5000);
  Identity id;
  id.size = 4;
  StallInspector inspector(config, id);
  std::vector<std::vector<PendingAge>> perRank = {{{"a", 1500}, {"b", 200}}, {{"a", 6000}}, {}, {}};
  // Rank 3 joined: "a" is missing on rank 2 only.
  StallReport report = inspector.analyze(perRank, {false, false, false, true});
  EXPECT_NE(report.warning.find("'a' missing on ranks [2] (submitted by ranks [0, 1], "
                                "waiting 6.0 s)"),
            std::string::npos)
      << report.warning;
  EXPECT_EQ(report.warning.find("'b'"), std::string::npos);  // too young
  EXPECT_TRUE(report.shutdown);
  // Already reported: no second warning while the stall lasts.
  EXPECT_TRUE(inspector.analyze(perRank, {false, false, false, true}).warning.empty());
  // Round trip and malformed input.
  auto back = wire::decodeReport(wire::encode(report));
  EXPECT_EQ(back.warning, report.warning);
  EXPECT_EQ(back.shutdownMessage, report.shutdownMessage);
  auto bytes = wire::encode(perRank[0]);
  EXPECT_EQ(wire::decodePending(bytes)[1].name, "b");
  bytes.pop_back();
  EXPECT_THROW(wire::decodePending(bytes), Internal);
}

}  // namespace
}  // namespace kolo::test
