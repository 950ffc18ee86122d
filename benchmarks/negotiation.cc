// Negotiation scaling: what a step of many tiny allreduces costs as ranks and
// tensors grow, with the response cache and without it (KOLO_CACHE_CAPACITY=0:
// every tensor negotiated every step). Cache modes:
//   cache      the configured capacity (KOLO_CACHE_CAPACITY, default 1024)
//   cache-fit  capacity = the largest tensor count, so every tensor hits in
//              steady state (only run when that exceeds the configured one)
//   no-cache   capacity 0
// Ranks are threads of this process, each with its own kolo::Engine on Gloo
// over one in-process store (as gloo's and kolo's thread tests run them);
// tensors hold one float32 each, so the time is coordination, not data.
//
//   build/bench/benchmarks/bench_negotiation [--ranks 2,4,8,16]
//       [--tensors 10,100,500,2000] [--trials 2] [--work 4000] [--csv out.csv]
//
// A step: every rank enqueues all its tensors and waits for all. Per block
// (ranks x cache mode) the engines are built once and run each tensor count
// in turn: 2 warm-up steps (negotiate, fill the cache), then
// clamp(work / tensors, 3, 50) timed steps on rank 0. The modes take turns
// per trial; tables show medians over trials. Per-cycle cost = step time /
// coordination cycles per step (EngineStats::cycles on rank 0). KOLO_*
// variables apply (e.g. KOLO_CYCLE_TIME); the modes set the cache capacity.
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "common.h"
#include "kolo/engine.h"

namespace {

using kolo::bench::Clock;
using kolo::bench::secondsSince;

struct Options {
  std::vector<int> ranks{2, 4, 8, 16};
  std::vector<int> tensors{10, 100, 500, 2000};
  int trials = 2;
  int work = 4000;
  std::string csv;
};

struct Sample {
  double stepSeconds = 0;
  double cycles = 0;             // per step
  double coordinatorRounds = 0;  // per step
  double cachedResponses = 0;    // per step
  double backendCalls = 0;       // per step
};

struct Mode {
  std::string name;
  int capacity = 0;  // response cache entries
};

int stepsFor(const Options& opt, int tensors) { return std::clamp(opt.work / tensors, 3, 50); }

// One block: `ranks` engines (threads) in one cache mode, every tensor count.
// Returns rank 0's sample per tensor count.
std::vector<Sample> runBlock(const Options& opt, int ranks, const Mode& mode) {
  auto store = kolo::makeHashStore();
  std::vector<Sample> out(opt.tensors.size());
  std::vector<std::exception_ptr> errors(ranks);
  auto body = [&](int rank) {
    kolo::Config config = kolo::bench::engineConfig("gloo");
    config.cacheCapacity = mode.capacity;
    kolo::Identity id;
    id.rank = rank;
    id.size = ranks;
    id.localRank = rank;
    id.localSize = ranks;
    kolo::Engine engine(config, id, store);
    const int most = *std::max_element(opt.tensors.begin(), opt.tensors.end());
    std::vector<float> values(most, 1.0f);
    std::vector<kolo::Handle> handles;
    auto step = [&](int n) {
      handles.clear();
      for (int k = 0; k < n; ++k) {
        kolo::Request q;
        q.name = "t" + std::to_string(k);
        q.shape = {1};
        values[k] = 1.0f;
        handles.push_back(
            engine.enqueue(std::move(q), kolo::Entry{&values[k], &values[k], {}, {}}));
      }
      for (auto& h : handles) h.wait();
    };
    for (size_t c = 0; c < opt.tensors.size(); ++c) {
      const int n = opt.tensors[c];
      const int steps = stepsFor(opt, n);
      step(n);
      step(n);
      engine.barrier().wait();
      const auto before = engine.stats();
      const auto start = Clock::now();
      for (int s = 0; s < steps; ++s) step(n);
      const double took = secondsSince(start);
      const auto after = engine.stats();
      if (rank == 0) {
        out[c] = {took / steps, double(after.cycles - before.cycles) / steps,
                  double(after.coordinatorRounds - before.coordinatorRounds) / steps,
                  double(after.cachedResponses - before.cachedResponses) / steps,
                  double(after.backendCalls - before.backendCalls) / steps};
      }
      engine.barrier().wait();
    }
    engine.shutdown();
  };
  std::vector<std::thread> threads;
  threads.reserve(ranks);
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

int run(int argc, char** argv) {
  Options opt;
  CLI::App app{"negotiation cost per step and per cycle vs ranks and tensors"};
  app.add_option("--ranks", opt.ranks, "comma-separated rank counts")->delimiter(',');
  app.add_option("--tensors", opt.tensors, "comma-separated tensor counts")->delimiter(',');
  app.add_option("--trials", opt.trials, "alternating trials")->check(CLI::PositiveNumber);
  app.add_option("--work", opt.work, "timed steps = clamp(work / tensors, 3, 50)");
  app.add_option("--csv", opt.csv, "write results here");
  CLI11_PARSE(app, argc, argv);

  const int configured = kolo::bench::engineConfig("gloo").cacheCapacity;
  const int most = *std::max_element(opt.tensors.begin(), opt.tensors.end());
  std::vector<Mode> modes{{"cache", configured}};
  if (most > configured) modes.push_back({"cache-fit", most});
  modes.push_back({"no-cache", 0});
  const int nm = static_cast<int>(modes.size());

  // samples[{mode index, ranks, tensor index}]
  std::map<std::tuple<int, int, size_t>, std::vector<Sample>> samples;
  for (int r : opt.ranks) {
    for (int t = 0; t < opt.trials; ++t) {
      for (int i = 0; i < nm; ++i) {
        const int m = kolo::bench::turn(i, t, nm);
        const auto block = runBlock(opt, r, modes[m]);
        for (size_t c = 0; c < block.size(); ++c) samples[{m, r, c}].push_back(block[c]);
      }
    }
    fmt::print(stderr, "  negotiation: {} ranks done\n", r);
  }
  auto med = [&](int m, int r, size_t c, double Sample::*field) {
    std::vector<double> v;
    for (const auto& s : samples.at({m, r, c})) v.push_back(s.*field);
    return kolo::bench::median(v);
  };
  auto stepMs = [&](int m, int r, size_t c) { return med(m, r, c, &Sample::stepSeconds) * 1e3; };
  auto cycleUs = [&](int m, int r, size_t c) {
    return med(m, r, c, &Sample::stepSeconds) / std::max(1.0, med(m, r, c, &Sample::cycles)) * 1e6;
  };

  fmt::print(
      "negotiation: ranks as threads (kolo on gloo, one host), tensors of 1 float32; "
      "median of {} alternating trials\n",
      opt.trials);
  auto table = [&](const std::string& title, auto value, const char* format) {
    fmt::print("\n{}\n{:<10}", title, "tensors");
    for (int r : opt.ranks) fmt::print(" {:>10}", fmt::format("{} ranks", r));
    fmt::print("\n");
    for (size_t c = 0; c < opt.tensors.size(); ++c) {
      fmt::print("{:<10}", opt.tensors[c]);
      for (int r : opt.ranks) fmt::print(" {:>10}", fmt::format(fmt::runtime(format), value(r, c)));
      fmt::print("\n");
    }
  };
  for (int m = 0; m < nm; ++m) {
    const std::string tag = fmt::format("{} (capacity {})", modes[m].name, modes[m].capacity);
    table(
        "ms per step, " + tag, [&](int r, size_t c) { return stepMs(m, r, c); }, "{:.2f}");
    table(
        "us per cycle, " + tag, [&](int r, size_t c) { return cycleUs(m, r, c); }, "{:.0f}");
    table(
        "cycles per step, " + tag, [&](int r, size_t c) { return med(m, r, c, &Sample::cycles); },
        "{:.1f}");
    if (modes[m].capacity > 0) {
      table(
          "cache hits (% of tensors per step), " + tag,
          [&](int r, size_t c) {
            return 100.0 * med(m, r, c, &Sample::cachedResponses) / opt.tensors[c];
          },
          "{:.0f}%");
    }
  }
  const int off = nm - 1;
  for (int m = 0; m < off; ++m) {
    table(
        "step time no-cache / " + modes[m].name + " (above 1: the cache helps)",
        [&](int r, size_t c) { return stepMs(off, r, c) / stepMs(m, r, c); }, "{:.2f}");
  }
  // Growth along each axis, from the smallest to the largest setting.
  fmt::print("\n");
  const int r0 = opt.ranks.front(), r1 = opt.ranks.back();
  const size_t c0 = 0, c1 = opt.tensors.size() - 1;
  for (int m = 0; m < nm; ++m) {
    fmt::print(
        "growth, {}: {} -> {} ranks at {} tensors: x{:.1f}; {} -> {} tensors at {} ranks: "
        "x{:.1f}\n",
        modes[m].name, r0, r1, opt.tensors[c1], stepMs(m, r1, c1) / stepMs(m, r0, c1),
        opt.tensors[c0], opt.tensors[c1], r1, stepMs(m, r1, c1) / stepMs(m, r1, c0));
  }

  if (!opt.csv.empty()) {
    auto file = kolo::bench::openForWriting(opt.csv);
    std::FILE* csv = file.get();
    // Grouped by mode, then ranks (one block per plotted line).
    fmt::print(csv,
               "mode,ranks,tensors,capacity,step_ms,cycle_us,cycles_per_step,"
               "coordinator_rounds_per_step,cached_responses_per_step,"
               "backend_calls_per_step,steps,trials\n");
    for (int m = 0; m < nm; ++m) {
      for (int r : opt.ranks) {
        for (size_t c = 0; c < opt.tensors.size(); ++c) {
          fmt::print(csv, "{},{},{},{},{:.4f},{:.2f},{:.2f},{:.2f},{:.2f},{:.2f},{},{}\n",
                     modes[m].name, r, opt.tensors[c], modes[m].capacity, stepMs(m, r, c),
                     cycleUs(m, r, c), med(m, r, c, &Sample::cycles),
                     med(m, r, c, &Sample::coordinatorRounds),
                     med(m, r, c, &Sample::cachedResponses), med(m, r, c, &Sample::backendCalls),
                     stepsFor(opt, opt.tensors[c]), opt.trials);
        }
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_negotiation: %s\n", e.what());
    return 1;
  }
}
