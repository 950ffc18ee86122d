// End-to-end latency of one allreduce (float32, sum) between two processes,
// at a few sizes (default 4 B, 64 KiB, 1 MiB): kolo with its defaults
// (kolo-shm: shared memory on one host), kolo on MPI and on Gloo, against raw
// MPI_Allreduce and raw gloo::allreduce, in one run. Run under mpirun
// (benchmarks/run.sh latency does):
//
//   mpirun --allow-run-as-root --bind-to none -np 2 build/bench/benchmarks/bench_latency
//       [--trials 5] [--iters 400] [--seconds 0.3] [--sizes 4,65536,1048576]
//       [--csv out.csv] [--methods mpi,kolo-shm,kolo-mpi,gloo,kolo-gloo]
//
// Each trial runs every method in rotating order: set up, then per size 50
// warm-up calls and back-to-back calls, each timed on rank 0 from the call
// (kolo: enqueue) to its return (kolo: the handle's wait): --iters of them,
// or as many as fit in --seconds by the warm-up's pace when fewer (at least
// 50; agreed between the ranks). The tables pool the samples of all trials
// per method and size: median, p90, mean and min. Ratios against raw MPI are
// taken per trial (the two medians of one trial, measured minutes apart at
// most) and the median of those is printed with their range, so a load
// spike that hits one trial moves neither.
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <utility>
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
  double seconds = 0.3;
  std::string csv;
  std::vector<size_t> sizes{4, 64 * 1024, 1024 * 1024};
  std::vector<std::string> methods{"mpi", "kolo-shm", "kolo-mpi", "gloo", "kolo-gloo"};
};

// Per-call seconds of back-to-back allreduces of bytes (float32 elements).
std::vector<double> timeCalls(const Options& opt, kolo::bench::Allreducer& ar, int worldSize,
                              size_t bytes) {
  const size_t count = std::max<size_t>(bytes / sizeof(float), 1);
  // Zeros: the sum stays zero, so no call meets infinities or denormals.
  std::vector<float> data(count, 0.0f);
  // One name per size: kolo's response cache holds each after its first call.
  const std::vector<kolo::bench::Tensor> one{
      {"latency." + std::to_string(bytes), {static_cast<int64_t>(count)}, data.data(), count}};
  const auto warm = Clock::now();
  for (int i = 0; i < kWarmup; ++i) ar.allreduce(one);
  const int iters = kolo::bench::agreeOnCalls(ar, worldSize, secondsSince(warm) / kWarmup,
                                              opt.seconds, std::min(kWarmup, opt.iters), opt.iters);
  ar.barrier();
  std::vector<double> out;
  out.reserve(iters);
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    ar.allreduce(one);
    out.push_back(secondsSince(start));
  }
  ar.barrier();
  return out;
}

struct Row {
  double median, p90, mean, min;
};

Row rowOf(const std::vector<double>& v) {
  return {kolo::bench::median(v) * 1e6, kolo::bench::percentile(v, 0.9) * 1e6,
          std::accumulate(v.begin(), v.end(), 0.0) / v.size() * 1e6,
          kolo::bench::percentile(v, 0.0) * 1e6};
}

int run(kolo::bench::MpiJob& job, int argc, char** argv) {
  Options opt;
  CLI::App app{"allreduce latency: kolo vs raw MPI and Gloo, 2+ ranks (run under mpirun)"};
  app.add_option("--trials", opt.trials, "alternating trials")->check(CLI::PositiveNumber);
  app.add_option("--iters", opt.iters, "most timed calls per method, size and trial")
      ->check(CLI::PositiveNumber);
  app.add_option("--seconds", opt.seconds, "at most about this long per method, size and trial");
  app.add_option("--sizes", opt.sizes, "comma-separated sizes in bytes (float32 elements)")
      ->delimiter(',');
  app.add_option("--methods", opt.methods, "comma-separated methods")->delimiter(',');
  app.add_option("--csv", opt.csv, "write results here (rank 0)");
  CLI11_PARSE(app, argc, argv);

  using Key = std::pair<std::string, size_t>;  // method, bytes
  std::map<Key, std::vector<double>> samples;
  std::map<Key, std::vector<double>> trialMedians;  // by trial, in trial order
  const int m = static_cast<int>(opt.methods.size());
  for (int t = 0; t < opt.trials; ++t) {
    for (int i = 0; i < m; ++i) {
      const std::string& name = opt.methods[kolo::bench::turn(i, t, m)];
      auto ar = kolo::bench::makeAllreducer(name, job);
      for (size_t bytes : opt.sizes) {
        auto calls = timeCalls(opt, *ar, job.size(), bytes);
        trialMedians[{name, bytes}].push_back(kolo::bench::median(calls));
        auto& s = samples[{name, bytes}];
        s.insert(s.end(), calls.begin(), calls.end());
      }
      ar.reset();
      job.barrier();
    }
  }
  if (job.rank() != 0) return 0;

  std::map<Key, Row> rows;
  for (const auto& [key, v] : samples) rows[key] = rowOf(v);
  fmt::print("allreduce latency (float32 sum), {} ranks, samples of {} alternating trials; us\n",
             job.size(), opt.trials);
  for (size_t bytes : opt.sizes) {
    const std::string label = kolo::bench::bytesLabel(bytes);
    fmt::print("\n{:<10} {:>9} {:>9} {:>9} {:>9} {:>8}  {}\n", label, "median", "p90", "mean",
               "min", "calls", "median per trial (min..max)");
    for (const auto& name : opt.methods) {
      const Row& r = rows[{name, bytes}];
      const auto& tm = trialMedians[{name, bytes}];
      fmt::print("{:<10} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>8}  {:.1f}..{:.1f}\n", name,
                 r.median, r.p90, r.mean, r.min, samples[{name, bytes}].size(),
                 kolo::bench::percentile(tm, 0.0) * 1e6, kolo::bench::percentile(tm, 1.0) * 1e6);
    }
  }
  // kolo's time over the raw backend's, trial by trial.
  auto has = [&](const std::string& method) {
    return std::find(opt.methods.begin(), opt.methods.end(), method) != opt.methods.end();
  };
  const std::pair<const char*, const char*> pairs[] = {
      {"kolo-shm", "mpi"}, {"kolo-mpi", "mpi"}, {"kolo-gloo", "gloo"}};
  fmt::print("\nratios of per-trial medians (below 1: kolo faster): median (min..max)\n");
  std::map<Key, double> ratioOf;  // (kolo method, bytes) -> median ratio
  for (const auto& [kolo, raw] : pairs) {
    if (!has(kolo) || !has(raw)) continue;
    fmt::print("{:<16}", fmt::format("{}/{}", kolo, raw));
    for (size_t bytes : opt.sizes) {
      const auto& k = trialMedians[{kolo, bytes}];
      const auto& r = trialMedians[{raw, bytes}];
      std::vector<double> ratios;
      for (size_t t = 0; t < k.size() && t < r.size(); ++t) ratios.push_back(k[t] / r[t]);
      const double med = kolo::bench::median(ratios);
      ratioOf[{kolo, bytes}] = med;
      fmt::print("  {}: {:.2f} ({:.2f}..{:.2f})", kolo::bench::bytesLabel(bytes), med,
                 kolo::bench::percentile(ratios, 0.0), kolo::bench::percentile(ratios, 1.0));
    }
    fmt::print("\n");
  }
  const size_t k64 = 64 * 1024;
  if (ratioOf.count({"kolo-shm", k64})) {
    const double r = ratioOf[{"kolo-shm", k64}];
    fmt::print("target: kolo (defaults) / raw MPI at 64 KiB = {:.2f} (target <= 1): {}\n", r,
               r <= 1 ? "met" : "NOT met");
  }

  if (!opt.csv.empty()) {
    auto file = kolo::bench::openForWriting(opt.csv);
    std::FILE* csv = file.get();
    fmt::print(csv, "variant,median_us,p90_us,mean_us,min_us,samples,method,bytes\n");
    for (size_t bytes : opt.sizes) {
      for (const auto& name : opt.methods) {
        const Row& r = rows[{name, bytes}];
        fmt::print(csv, "{} {},{:.3f},{:.3f},{:.3f},{:.3f},{},{},{}\n", name,
                   kolo::bench::bytesLabel(bytes), r.median, r.p90, r.mean, r.min,
                   samples[{name, bytes}].size(), name, bytes);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return kolo::bench::runMpiMain(argc, argv, run); }
