// Timeline: files every rank writes parse as JSON and hold, per tensor row,
// the documented spans in order; a file cut off mid-run is repairable as
// documented; start/stop/restart at run time.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/observability_json.h"
#include "core/ops_util.h"
#include "harness/harness.h"

namespace kolo::test {
namespace {

namespace fs = std::filesystem;

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path freshDir(const std::string& name) {
  fs::path dir =
      fs::temp_directory_path() / ("kolo_obs_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Per tensor row: the names of its 'B' events in file order, after checking
// that B/E events nest properly on every row.
std::map<std::string, std::vector<std::string>> spansByTensor(const json::Value& trace) {
  EXPECT_EQ(trace.kind, json::Value::kArray);
  std::map<int, std::string> rowName;
  std::map<int, std::vector<std::string>> begins, stack;
  for (const auto& e : trace.array) {
    const std::string ph = e["ph"].str;
    const int tid = static_cast<int>(e["tid"].number);
    if (ph == "M" && e["name"].str == "thread_name") rowName[tid] = e["args"]["name"].str;
    if (ph == "B") {
      begins[tid].push_back(e["name"].str);
      stack[tid].push_back(e["name"].str);
    }
    if (ph == "E") {
      EXPECT_FALSE(stack[tid].empty()) << "E without B on row " << tid;
      if (stack[tid].empty()) continue;
      EXPECT_EQ(stack[tid].back(), e["name"].str) << "row " << rowName[tid];
      stack[tid].pop_back();
    }
    if (ph == "i" && e["name"].str == "READY") {
      EXPECT_FALSE(stack[tid].empty());
      if (!stack[tid].empty()) EXPECT_EQ(stack[tid].back(), "NEGOTIATE");
    }
  }
  for (const auto& [tid, open] : stack)
    EXPECT_TRUE(open.empty()) << "open spans on " << rowName[tid];
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [tid, names] : begins) out[rowName.at(tid)] = names;
  return out;
}

std::vector<std::string> repeat(const std::vector<std::string>& v, int times) {
  std::vector<std::string> out;
  for (int i = 0; i < times; ++i) out.insert(out.end(), v.begin(), v.end());
  return out;
}

void runSteps(Engine& engine, int rank, const std::string& prefix, int steps) {
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<float>> bufs(4, std::vector<float>(256, 1.0f + rank));
    std::vector<Request> reqs;
    std::vector<Entry> entries;
    for (size_t k = 0; k < bufs.size(); ++k) {
      reqs.push_back(makeRequest(prefix + "fused." + std::to_string(k), OpType::kAllreduce,
                                 DataType::kFloat32, {256}));
      entries.push_back(Entry{bufs[k].data(), bufs[k].data(), {}, {}});
    }
    auto handles = engine.enqueueGroup(reqs, entries);
    // float64: never fused with the float32 group, so it runs in place.
    std::vector<double> single(1000, 1.0);
    engine
        .enqueue(makeRequest(prefix + "single", OpType::kAllreduce, DataType::kFloat64, {1000}),
                 Entry{single.data(), single.data(), {}, {}})
        .wait();
    for (auto& h : handles) h.wait();
    ASSERT_FLOAT_EQ(bufs[3][7], 3.0f);
    ASSERT_DOUBLE_EQ(single[5], 2.0);
  }
}

// The ranks are threads of one host: the data plane is shared memory.
const std::string kDataPlaneSpan = "SHM_ALLREDUCE";
const std::vector<std::string> kFusedSpans = {"ALLREDUCE",    "NEGOTIATE",
                                              "QUEUE",        "MEMCPY_IN_FUSION_BUFFER",
                                              kDataPlaneSpan, "MEMCPY_OUT_FUSION_BUFFER"};
const std::vector<std::string> kSingleSpans = {"ALLREDUCE", "NEGOTIATE", "QUEUE", kDataPlaneSpan};

TEST(Timeline, EveryRankWritesJsonWithTheDocumentedSpansPerTensor) {
  fs::path dir = freshDir("spans");
  Config config = testConfig();
  config.timelinePath = (dir / "trace.json").string();
  config.timelineMarkCycles = true;
  spawn(
      2, [&](int rank, Engine& engine) { runSteps(engine, rank, "", 3); }, config);

  for (const std::string file : {"trace.json", "trace.rank1.json"}) {
    SCOPED_TRACE(file);
    json::Value trace = json::parse(readFile((dir / file).string()));  // strict: closed with ]
    auto spans = spansByTensor(trace);
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(spans["fused." + std::to_string(k)], repeat(kFusedSpans, 3));
    }
    EXPECT_EQ(spans["single"], repeat(kSingleSpans, 3));
    bool cycles = false, bytes = false;
    for (const auto& e : trace.array) {
      cycles = cycles || e["name"].str == "CYCLE";
      if (e["name"].str == kDataPlaneSpan && e["ph"].str == "B") {
        bytes = bytes || e["args"]["bytes"].number == 4 * 256 * 4;
      }
    }
    EXPECT_TRUE(cycles);
    EXPECT_TRUE(bytes);
  }
}

TEST(Timeline, AProcessSetsTensorsHaveTheirOwnRows) {
  // 'x' in set 0 and 'x' in a rank's own set are two tensors, on two rows.
  fs::path dir = freshDir("sets");
  Config config = testConfig();
  config.timelinePath = (dir / "trace.json").string();
  spawnWithSets(
      2, {{0}, {1}},
      [&](int rank, Engine& engine) {
        for (int set : {0, rank + 1}) {
          std::vector<float> v(8, 1.0f);
          Request q = makeRequest("x", OpType::kAllreduce, DataType::kFloat32, {8});
          q.processSet = set;
          engine.enqueue(q, Entry{v.data(), v.data(), {}, {}}).wait();
        }
        engine.barrier().wait();  // a rank that shuts down ends the job for all
      },
      config);
  auto spans = spansByTensor(json::parse(readFile((dir / "trace.json").string())));
  EXPECT_EQ(spans["x"], kSingleSpans);
  // A set of one rank needs no shared memory: its plane is plain Gloo.
  const std::vector<std::string> oneRankSpans = {"ALLREDUCE", "NEGOTIATE", "QUEUE",
                                                 "GLOO_ALLREDUCE"};
  EXPECT_EQ(spans["x [process set 1]"], oneRankSpans);
  EXPECT_EQ(spans.count("x [process set 2]"), 0u);  // rank 0 is not in set 2
  auto rank1 = spansByTensor(json::parse(readFile((dir / "trace.rank1.json").string())));
  EXPECT_EQ(rank1["x"], kSingleSpans);
  EXPECT_EQ(rank1["x [process set 2]"], oneRankSpans);
}

TEST(Timeline, AProcessSetOnOneHostReducesOverSharedMemory) {
  // 4 ranks on 2 "hosts": the job's plane is hierarchical; set 1 (ranks 0
  // and 1, one host) picks shared memory for itself.
  fs::path dir = freshDir("sethost");
  Config config = testConfig();
  config.timelinePath = (dir / "trace.json").string();
  config.hostKeyOverride = [](int rank) { return "host " + std::to_string(rank / 2); };
  spawnWithSets(
      4, {{0, 1}},
      [&](int rank, Engine& engine) {
        std::vector<float> v(8, 1.0f);
        if (rank < 2) {
          Request q = makeRequest("y", OpType::kAllreduce, DataType::kFloat32, {8});
          q.processSet = 1;
          engine.enqueue(q, Entry{v.data(), v.data(), {}, {}}).wait();
          EXPECT_EQ(v[0], 2.0f);  // the sum over the set's two ranks
        }
        engine.barrier().wait();
      },
      config);
  auto spans = spansByTensor(json::parse(readFile((dir / "trace.json").string())));
  EXPECT_EQ(spans["y [process set 1]"], kSingleSpans);  // SHM_ALLREDUCE
}

TEST(Timeline, FileCutOffMidRunIsAnArrayMissingOnlyItsBracket) {
  fs::path dir = freshDir("midrun");
  Config config = testConfig();
  config.timelinePath = (dir / "t.json").string();
  std::atomic<bool> checked{false};
  spawn(
      2,
      [&](int rank, Engine& engine) {
        runSteps(engine, rank, "", 2);
        if (rank == 1) {
          // Shutting down would end rank 0's run (and close its file) too.
          for (int i = 0; i < 6000 && !checked.load(); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
        }
        if (rank == 0) {
          // What a crash now would leave behind, once the writer (flushing
          // every 20 ms) has caught up with both steps; a loaded machine
          // may take longer. (Checked by counting, not with spansByTensor:
          // its expectations would fail on a snapshot taken halfway. Every
          // span of both steps must be in: the file is also balanced after
          // the first step alone.)
          const size_t allBegins = 2 * (4 * kFusedSpans.size() + kSingleSpans.size());
          auto count = [](const std::string& text, const std::string& what) {
            size_t n = 0;
            for (size_t at = text.find(what); at != std::string::npos;
                 at = text.find(what, at + 1)) {
              ++n;
            }
            return n;
          };
          std::string text;
          for (int i = 0; i < 1500; ++i) {
            text = readFile(config.timelinePath);
            const size_t begins = count(text, "\"ph\":\"B\"");
            if (text.size() >= 2 && text.substr(text.size() - 2) == ",\n" &&
                begins >= allBegins && begins == count(text, "\"ph\":\"E\"")) {
              break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
          ASSERT_GE(text.size(), 4u);
          EXPECT_EQ(text.substr(0, 2), "[\n");
          EXPECT_EQ(text.substr(text.size() - 2), ",\n");
          EXPECT_THROW(json::parse(text), std::runtime_error);
          // The documented repair: drop the last ",\n", append "]".
          auto spans = spansByTensor(json::parse(text.substr(0, text.size() - 2) + "]"));
          EXPECT_EQ(spans["single"], repeat(kSingleSpans, 2));
          checked = true;
        }
      },
      config);
}

TEST(Timeline, StartStopAndRestartAtRunTime) {
  fs::path dir = freshDir("restart");
  const std::string first = (dir / "first.json").string();
  const std::string second = (dir / "second.json").string();
  spawn(2, [&](int rank, Engine& engine) {
    runSteps(engine, rank, "a0.", 1);  // no timeline yet
    engine.startTimeline(first);
    runSteps(engine, rank, "a1.", 2);
    engine.stopTimeline();
    if (rank == 0) {
      // Complete (closed) as soon as stopTimeline returns.
      auto spans = spansByTensor(json::parse(readFile(first)));
      EXPECT_EQ(spans["a1.single"], repeat(kSingleSpans, 2));
      EXPECT_EQ(spans.count("a0.single"), 0u);
    }
    runSteps(engine, rank, "a2.", 1);  // off again
    engine.startTimeline(second);
    engine.startTimeline(second);  // replacing a running timeline is fine
    runSteps(engine, rank, "a3.", 1);
    engine.stopTimeline();
    engine.stopTimeline();  // idempotent
  });
  for (int rank = 0; rank < 2; ++rank) {
    auto path = [&](const std::string& p) {
      return rank == 0 ? p : p.substr(0, p.size() - 5) + ".rank1.json";
    };
    auto a = spansByTensor(json::parse(readFile(path(first))));
    auto b = spansByTensor(json::parse(readFile(path(second))));
    EXPECT_EQ(a["a1.fused.0"], repeat(kFusedSpans, 2));
    EXPECT_EQ(a.count("a2.single") + a.count("a3.single"), 0u);
    EXPECT_EQ(b["a3.fused.2"], kFusedSpans);
    EXPECT_EQ(b.count("a1.single") + b.count("a2.single"), 0u);
  }
}

TEST(Timeline, StopWhileOpsArePendingClosesTheirSpans) {
  fs::path dir = freshDir("pending");
  const std::string path = (dir / "p.json").string();
  spawn(2, [&](int rank, Engine& engine) {
    engine.startTimeline(path);
    std::vector<float> v(8, 1.0f);
    Handle h;
    if (rank == 0) {
      h = engine.enqueue(makeRequest("late", OpType::kAllreduce, DataType::kFloat32, {8}),
                         Entry{v.data(), v.data(), {}, {}});
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    engine.stopTimeline();  // rank 0's "late" is still negotiating
    engine.barrier().wait();
    if (rank == 1) {
      engine
          .enqueue(makeRequest("late", OpType::kAllreduce, DataType::kFloat32, {8}),
                   Entry{v.data(), v.data(), {}, {}})
          .wait();
    } else {
      h.wait();
    }
  });
  auto spans = spansByTensor(json::parse(readFile(path)));  // checks nesting/closure
  EXPECT_EQ(spans["late"], (std::vector<std::string>{"ALLREDUCE", "NEGOTIATE"}));
}

TEST(Timeline, UnwritablePathIsAClearError) {
  Config config = testConfig();
  config.timelinePath = "/nonexistent-dir/x/trace.json";
  try {
    Identity id;
    Engine engine(config, id, makeHashStore());
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("KOLO_TIMELINE"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x/trace.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace kolo::test
