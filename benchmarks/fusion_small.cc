// 100 steps of 64 x 16 KiB float32 allreduces between 2 in-process ranks:
// through kolo (negotiated, cached, fused) vs raw Gloo one tensor at a time.
// Trials alternate between the two so both see the same machine load; the
// table reports the median step time of each and their ratio.
//
//   build/default/benchmarks/bench_fusion_small [--steps 100] [--trials 5]
//       [--timeline PATH]      also time kolo with the timeline written to PATH
//       [--threshold BYTES] [--cycle-ms MS]   kolo's fusion threshold, cycle time
//       [--autotune CSV]       kolo with KOLO_AUTOTUNE (samples logged to CSV)
//       [--kolo-only]          skip the raw Gloo baseline
#include <gloo/allreduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kolo/engine.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTensors = 64;
constexpr int kElements = 4096;  // 16 KiB of float32

void sumFloats(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<float*>(c);
  auto* x = static_cast<const float*>(a);
  auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

template <typename Fn>
void onTwoRanks(Fn fn) {
  std::thread t1([&] { fn(1); });
  fn(0);
  t1.join();
}

struct Options {
  int steps = 100;
  int trials = 5;
  std::string timeline;
  int64_t threshold = -1;
  double cycleMs = -1;
  std::string autotuneCsv;
  bool koloOnly = false;
};

double viaKolo(const Options& opt, const std::shared_ptr<kolo::Store>& store,
               const std::string& timeline = "") {
  const int steps = opt.steps;
  double seconds = 0;
  onTwoRanks([&](int rank) {
    // KOLO_* variables apply (e.g. KOLO_AUTOTUNE_SAMPLE_TIME); options override.
    kolo::Config config = kolo::Config::fromEnv();
    config.logLevel = kolo::LogLevel::kError;
    config.timelinePath = timeline;
    if (opt.threshold >= 0) config.fusionThresholdBytes = opt.threshold;
    if (opt.cycleMs >= 0) {
      config.cycleTime = std::chrono::microseconds(static_cast<int64_t>(opt.cycleMs * 1000));
    }
    if (!opt.autotuneCsv.empty()) {
      config.autotune = true;
      config.autotuneLogPath = opt.autotuneCsv;
    }
    kolo::Identity id;
    id.rank = rank;
    id.size = 2;
    id.localRank = rank;
    id.localSize = 2;
    kolo::Engine engine(config, id, store);
    std::vector<std::vector<float>> bufs(kTensors, std::vector<float>(kElements, 1.0f));
    auto step = [&] {
      std::vector<kolo::Handle> handles;
      handles.reserve(kTensors);
      for (int k = 0; k < kTensors; ++k) {
        kolo::Request q;
        q.name = "grad." + std::to_string(k);
        q.shape = {kElements};
        handles.push_back(engine.enqueue(q, kolo::Entry{bufs[k].data(), bufs[k].data(), {}, {}}));
      }
      for (auto& h : handles) h.wait();
    };
    step();  // warm-up: negotiate once, fill the cache
    auto start = Clock::now();
    for (int s = 0; s < steps; ++s) step();
    double took = std::chrono::duration<double>(Clock::now() - start).count();
    if (rank == 0) {
      seconds = took;
      auto st = engine.stats();
      std::printf("  kolo rank 0%s: %.1f cycles, %.1f backend calls per step\n",
                  timeline.empty() ? "" : " (timeline on)",
                  static_cast<double>(st.cycles) / (steps + 1),
                  static_cast<double>(st.backendCalls) / (steps + 1));
      if (config.autotune) {
        auto t = engine.tuning();
        std::printf("  autotune %s after %zu changes: fusion threshold %lld B, cycle time %.2f ms, "
                    "cache %s\n",
                    t.converged ? "converged" : "NOT converged", t.history.size(),
                    static_cast<long long>(t.current.fusionThresholdBytes),
                    t.current.cycleTime.count() / 1000.0, t.current.cacheEnabled ? "on" : "off");
      }
    }
    engine.shutdown();
  });
  return seconds;
}

double rawGloo(int steps) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  double seconds = 0;
  onTwoRanks([&](int rank) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, 2);
    context->connectFullMesh(*store, device);
    std::vector<std::vector<float>> bufs(kTensors, std::vector<float>(kElements, 1.0f));
    auto step = [&] {
      for (int k = 0; k < kTensors; ++k) {
        gloo::AllreduceOptions opts(context);
        opts.setOutput(bufs[k].data(), kElements);
        opts.setReduceFunction(sumFloats);
        opts.setTag(static_cast<uint32_t>(k));
        gloo::allreduce(opts);
      }
    };
    step();
    auto start = Clock::now();
    for (int s = 0; s < steps; ++s) step();
    double took = std::chrono::duration<double>(Clock::now() - start).count();
    if (rank == 0) seconds = took;
  });
  return seconds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const bool more = i + 1 < argc;
    if (!std::strcmp(argv[i], "--kolo-only")) opt.koloOnly = true;
    else if (more && !std::strcmp(argv[i], "--steps")) opt.steps = std::atoi(argv[++i]);
    else if (more && !std::strcmp(argv[i], "--trials")) opt.trials = std::atoi(argv[++i]);
    else if (more && !std::strcmp(argv[i], "--timeline")) opt.timeline = argv[++i];
    else if (more && !std::strcmp(argv[i], "--threshold")) opt.threshold = std::atoll(argv[++i]);
    else if (more && !std::strcmp(argv[i], "--cycle-ms")) opt.cycleMs = std::atof(argv[++i]);
    else if (more && !std::strcmp(argv[i], "--autotune")) opt.autotuneCsv = argv[++i];
    else {
      std::fprintf(stderr, "unknown or incomplete option %s\n", argv[i]);
      return 2;
    }
  }
  const int steps = opt.steps;
  const int trials = opt.trials;
  std::vector<double> k, kt, g;
  for (int t = 0; t < trials; ++t) {
    k.push_back(viaKolo(opt, kolo::makeHashStore()));
    if (!opt.timeline.empty()) kt.push_back(viaKolo(opt, kolo::makeHashStore(), opt.timeline));
    g.push_back(opt.koloOnly ? 1.0 : rawGloo(steps));
  }
  double km = median(k), gm = median(g);
  if (!kt.empty()) {
    double ktm = median(kt);
    std::printf("timeline overhead: %.3f ms/step off, %.3f ms/step on (%+.1f%%)\n",
                km * 1e3 / steps, ktm * 1e3 / steps, (ktm / km - 1) * 100);
  }
  if (opt.koloOnly) {
    std::printf("kolo per step: %.3f ms (median of %d trials of %d steps)\n", km * 1e3 / steps,
                trials, steps);
    return 0;
  }
  std::printf("%d steps of %d x 16 KiB float32 allreduce, 2 in-process ranks, median of %d trials\n",
              steps, kTensors, trials);
  std::printf("%-32s %12s %14s\n", "method", "total (s)", "per step (ms)");
  std::printf("%-32s %12.3f %14.3f\n", "kolo (fused, cached)", km, km * 1e3 / steps);
  std::printf("%-32s %12.3f %14.3f\n", "raw gloo, one tensor at a time", gm, gm * 1e3 / steps);
  std::printf("kolo / raw gloo = %.3f\n", km / gm);
  return 0;
}
