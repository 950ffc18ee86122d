// End-to-end latency of one 4-byte allreduce (one float32, sum), two
// processes: kolo on MPI vs raw MPI_Allreduce, kolo on Gloo vs raw
// gloo::allreduce, in one run. Run under mpirun (benchmarks/run.sh latency
// does):
//
//   mpirun --allow-run-as-root --bind-to none -np 2 build/bench/benchmarks/bench_latency
//       [--trials 5] [--iters 400] [--seconds 1]
//       [--csv out.csv] [--methods mpi,kolo-mpi,gloo,kolo-gloo]
//
// Each trial runs every method in rotating order: set up, 50 warm-up calls,
// then back-to-back calls, each timed on rank 0 from the call (kolo:
// enqueue) to its return (kolo: the handle's wait): --iters of them, or as
// many as fit in --seconds by the warm-up's pace when fewer (at least 50;
// agreed between the ranks). The table pools the samples of all trials:
// median, p90, mean and min per method.
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "allreducers.h"
#include "common.h"
#include "mpi_job.h"

namespace {

using kolo::bench::Clock;
using kolo::bench::secondsSince;

constexpr int kWarmup = 50;

struct Options {
  int trials = 5;
  int iters = 400;
  double seconds = 1.0;
  std::string csv;
  std::vector<std::string> methods{"mpi", "kolo-mpi", "gloo", "kolo-gloo"};
};

// Per-call seconds of back-to-back 4-byte allreduces.
std::vector<double> timeCalls(const Options& opt, kolo::bench::Allreducer& ar, int worldSize) {
  float value = 1.0f;
  const std::vector<kolo::bench::Tensor> one{{"latency.4B", {1}, &value, 1}};
  const auto warm = Clock::now();
  for (int i = 0; i < kWarmup; ++i) {
    value = 1.0f;
    ar.allreduce(one);
  }
  const int iters = kolo::bench::agreeOnCalls(ar, worldSize, secondsSince(warm) / kWarmup,
                                              opt.seconds, std::min(kWarmup, opt.iters), opt.iters);
  ar.barrier();
  std::vector<double> out;
  out.reserve(iters);
  for (int i = 0; i < iters; ++i) {
    value = 1.0f;
    const auto start = Clock::now();
    ar.allreduce(one);
    out.push_back(secondsSince(start));
  }
  ar.barrier();
  return out;
}

int run(kolo::bench::MpiJob& job, int argc, char** argv) {
  Options opt;
  CLI::App app{"4-byte allreduce latency: kolo vs raw, MPI and Gloo (run under mpirun)"};
  app.add_option("--trials", opt.trials, "alternating trials")->check(CLI::PositiveNumber);
  app.add_option("--iters", opt.iters, "most timed calls per method and trial")
      ->check(CLI::PositiveNumber);
  app.add_option("--seconds", opt.seconds, "at most about this long per method and trial");
  app.add_option("--methods", opt.methods, "comma-separated methods")->delimiter(',');
  app.add_option("--csv", opt.csv, "write results here (rank 0)");
  CLI11_PARSE(app, argc, argv);

  std::map<std::string, std::vector<double>> samples;
  std::map<std::string, std::vector<double>> trialMedians;  // spread between trials
  const int m = static_cast<int>(opt.methods.size());
  for (int t = 0; t < opt.trials; ++t) {
    for (int i = 0; i < m; ++i) {
      const std::string& name = opt.methods[kolo::bench::turn(i, t, m)];
      auto ar = kolo::bench::makeAllreducer(name, job);
      auto calls = timeCalls(opt, *ar, job.size());
      trialMedians[name].push_back(kolo::bench::median(calls));
      samples[name].insert(samples[name].end(), calls.begin(), calls.end());
      ar.reset();
      job.barrier();
    }
  }
  if (job.rank() != 0) return 0;

  struct Row {
    double median, p90, mean, min;
  };
  std::map<std::string, Row> rows;
  for (const auto& [name, v] : samples) {
    rows[name] = {kolo::bench::median(v) * 1e6, kolo::bench::percentile(v, 0.9) * 1e6,
                  std::accumulate(v.begin(), v.end(), 0.0) / v.size() * 1e6,
                  kolo::bench::percentile(v, 0.0) * 1e6};
  }
  fmt::print("4-byte allreduce latency, {} ranks, samples of {} alternating trials; us\n",
             job.size(), opt.trials);
  fmt::print("{:<10} {:>9} {:>9} {:>9} {:>9} {:>8}  {}\n", "method", "median", "p90", "mean", "min",
             "calls", "median per trial (min..max)");
  for (const auto& name : opt.methods) {
    const Row& r = rows[name];
    const auto& tm = trialMedians[name];
    fmt::print("{:<10} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>8}  {:.1f}..{:.1f}\n", name, r.median,
               r.p90, r.mean, r.min, samples[name].size(), kolo::bench::percentile(tm, 0.0) * 1e6,
               kolo::bench::percentile(tm, 1.0) * 1e6);
  }
  auto both = [&](const char* a, const char* b) { return rows.count(a) && rows.count(b); };
  for (const std::string raw : {"mpi", "gloo"}) {
    const std::string kolo = "kolo-" + raw;
    if (!both(kolo.c_str(), raw.c_str())) continue;
    const Row &k = rows[kolo], &r = rows[raw];
    fmt::print("{} - {}: median {:+.1f} us, p90 {:+.1f} us; {} / {} median = {:.1f}\n", kolo, raw,
               k.median - r.median, k.p90 - r.p90, kolo, raw, k.median / r.median);
  }
  if (rows.count("kolo-mpi")) {
    const double k = rows["kolo-mpi"].median;
    fmt::print("target: kolo-mpi median = {:.1f} us (target <= 50 us): {}\n", k,
               k <= 50 ? "met" : "NOT met");
  }
  if (both("kolo-gloo", "gloo")) {
    const double d = rows["kolo-gloo"].median - rows["gloo"].median;
    fmt::print("target: kolo-gloo median - gloo median = {:+.1f} us (target <= +50 us): {}\n", d,
               d <= 50 ? "met" : "NOT met");
  }

  if (!opt.csv.empty()) {
    auto file = kolo::bench::openForWriting(opt.csv);
    std::FILE* csv = file.get();
    fmt::print(csv, "variant,median_us,p90_us,mean_us,min_us,samples\n");
    for (const auto& name : opt.methods) {
      const Row& r = rows[name];
      fmt::print(csv, "{},{:.3f},{:.3f},{:.3f},{:.3f},{}\n", name, r.median, r.p90, r.mean, r.min,
                 samples[name].size());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return kolo::bench::runMpiMain(argc, argv, run); }
