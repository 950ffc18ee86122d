// Fusion on real gradient sets, two processes, MPI and Gloo in one run: each
// set's tensors through kolo, vs one raw allreduce of the set's total bytes
// (the floor: what perfect fusion with free copies would cost), vs one raw
// allreduce per tensor (no fusion). Run under mpirun (benchmarks/run.sh
// fusion does):
//
//   mpirun --allow-run-as-root --bind-to none -np 2 build/bench/benchmarks/bench_fusion_sets
//       --set resnet50=benchmarks/results/shapes-resnet50.csv
//       --set bert-base=benchmarks/results/shapes-bert-base.csv
//       [--many-small 2000] [--small-bytes 4096] [--backends mpi,gloo]
//       [--trials 3] [--seconds 1] [--csv out.csv]
//
// Shape files (name,shape,numel; shape as 64x3x7x7) come from the model
// definitions through bench_model_shapes. The many-small set is N tensors of
// --small-bytes each. A step enqueues every tensor of the set in reverse
// order (as backward produces gradients) and waits for all. Each trial runs
// the six methods (kolo, flat, per-tensor on each backend) in rotating order,
// each set up, warmed up (kolo: 2 steps, to negotiate and then run from the
// cache; raw: 1) and torn down on its own, and times as many steps as fit in
// --seconds by the last warm-up step (agreed between the ranks; 1..10). The
// table shows the median over trials of ms per step on rank 0, and ratios.
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "allreducers.h"
#include "common.h"
#include "mpi_job.h"

namespace {

using kolo::bench::Clock;
using kolo::bench::secondsSince;
using kolo::bench::Shape;
using kolo::bench::Tensor;

struct GradientSet {
  std::string name;
  std::vector<Shape> shapes;
  size_t numel() const {
    return std::accumulate(shapes.begin(), shapes.end(), size_t(0),
                           [](size_t n, const Shape& s) { return n + s.numel; });
  }
};

GradientSet readShapes(const std::string& name, const std::string& path) {
  return GradientSet{name, kolo::bench::readShapeFile(path)};
}

GradientSet manySmall(int count, size_t bytes) {
  GradientSet set{"many-small", {}};
  const auto n = static_cast<int64_t>(bytes / sizeof(float));
  for (int i = 0; i < count; ++i) set.shapes.push_back({"p" + std::to_string(i), {n}, size_t(n)});
  return set;
}

struct Method {
  std::string label;       // "kolo", "flat", "per-tensor"
  std::string backend;     // "mpi", "gloo"
  std::string allreducer;  // allreducers.h name
};

struct Sample {
  double secondsPerStep = 0;
  double cyclesPerStep = 0;
  double backendCallsPerStep = 0;
};

struct Options {
  std::vector<std::string> sets;
  int manySmallCount = 2000;
  size_t smallBytes = 4096;
  std::vector<std::string> backends{"mpi", "gloo"};
  int trials = 3;
  double seconds = 1.0;
  std::string csv;
};

Sample runMethod(const Method& m, const GradientSet& set, const std::vector<Tensor>& tensors,
                 double seconds, kolo::bench::MpiJob& job) {
  const size_t total = set.numel();
  float* arena = tensors.front().data;
  // Reverse order, as backward produces gradients.
  std::vector<Tensor> step;
  if (m.label == "flat") {
    step.push_back({set.name + ".flat", {static_cast<int64_t>(total)}, arena, total});
  } else {
    step.assign(tensors.rbegin(), tensors.rend());
  }
  std::fill(arena, arena + total, 1.0f);
  auto ar = kolo::bench::makeAllreducer(m.allreducer, job);
  ar->allreduce(step);
  if (arena[0] != static_cast<float>(job.size()) ||
      arena[total - 1] != static_cast<float>(job.size())) {
    throw std::runtime_error(m.label + " on " + m.backend + ": wrong sum for " + set.name);
  }
  if (m.label == "kolo") ar->allreduce(step);  // the first step from the cache
  const auto warm = Clock::now();
  ar->allreduce(step);
  const int steps = kolo::bench::agreeOnCalls(*ar, job.size(), secondsSince(warm), seconds, 1, 10);
  ar->barrier();
  const auto before = kolo::bench::statsOf(*ar);
  const auto start = Clock::now();
  for (int s = 0; s < steps; ++s) ar->allreduce(step);
  const double took = secondsSince(start);
  const auto after = kolo::bench::statsOf(*ar);
  ar->barrier();
  ar.reset();
  job.barrier();
  return {took / steps, double(after.cycles - before.cycles) / steps,
          double(after.backendCalls - before.backendCalls) / steps};
}

int run(kolo::bench::MpiJob& job, int argc, char** argv) {
  Options opt;
  CLI::App app{"fusion on real gradient sets: kolo vs flat vs per-tensor (run under mpirun)"};
  app.add_option("--set", opt.sets, "NAME=SHAPES.csv (repeatable)");
  app.add_option("--many-small", opt.manySmallCount, "tensors in the many-small set (0: none)");
  app.add_option("--small-bytes", opt.smallBytes, "bytes per many-small tensor");
  app.add_option("--backends", opt.backends, "comma-separated: mpi,gloo")->delimiter(',');
  app.add_option("--trials", opt.trials, "alternating trials")->check(CLI::PositiveNumber);
  app.add_option("--seconds", opt.seconds, "timed seconds per method and trial (about)");
  app.add_option("--csv", opt.csv, "write results here (rank 0)");
  CLI11_PARSE(app, argc, argv);

  std::vector<GradientSet> sets;
  for (const auto& spec : opt.sets) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("--set wants NAME=PATH: " + spec);
    sets.push_back(readShapes(spec.substr(0, eq), spec.substr(eq + 1)));
  }
  if (opt.manySmallCount > 0) sets.push_back(manySmall(opt.manySmallCount, opt.smallBytes));

  std::vector<Method> methods;
  for (const auto& b : opt.backends) {
    methods.push_back({"kolo", b, "kolo-" + b});
    methods.push_back({"flat", b, b});
    methods.push_back({"per-tensor", b, b});
  }
  size_t most = 0;
  for (const auto& s : sets) most = std::max(most, s.numel());
  std::vector<float> arena(most);

  if (job.rank() == 0) {
    fmt::print(
        "fusion sets, {} ranks, float32 sum; ms per step, median of {} alternating "
        "trials\n",
        job.size(), opt.trials);
    fmt::print("{:<11} {:>7} {:>8} {:<7} {:>9} {:>9} {:>11} {:>10} {:>16} {:>12} {:>13}\n", "set",
               "tensors", "MB", "backend", "kolo", "flat", "per-tensor", "kolo/flat",
               "kolo/per-tensor", "kolo cycles", "kolo bk calls");
  }
  kolo::bench::OutputFile file(nullptr, &std::fclose);
  if (job.rank() == 0 && !opt.csv.empty()) file = kolo::bench::openForWriting(opt.csv);
  std::FILE* csv = file.get();
  if (csv) {
    fmt::print(csv,
               "set,tensors,bytes,backend,kolo_ms,flat_ms,per_tensor_ms,kolo_over_flat,"
               "kolo_over_per_tensor,kolo_cycles_per_step,kolo_backend_calls_per_step,"
               "trials\n");
  }
  // ratio[set][backend] = kolo / flat, for the target lines.
  std::map<std::string, std::map<std::string, double>> overFlat;
  for (const auto& set : sets) {
    std::vector<Tensor> tensors;
    size_t offset = 0;
    for (const auto& s : set.shapes) {
      tensors.push_back({set.name + "." + s.name, s.dims, arena.data() + offset, s.numel});
      offset += s.numel;
    }
    const double mb = set.numel() * sizeof(float) / 1e6;
    std::vector<std::vector<Sample>> samples(methods.size());
    const int m = static_cast<int>(methods.size());
    for (int t = 0; t < opt.trials; ++t) {
      for (int i = 0; i < m; ++i) {
        const int k = kolo::bench::turn(i, t, m);
        samples[k].push_back(runMethod(methods[k], set, tensors, opt.seconds, job));
      }
    }
    if (job.rank() != 0) continue;
    auto med = [&](size_t k, double Sample::*field) {
      std::vector<double> v;
      for (const auto& s : samples[k]) v.push_back(s.*field);
      return kolo::bench::median(v);
    };
    for (size_t k = 0; k < methods.size(); k += 3) {
      const double kolo = med(k, &Sample::secondsPerStep) * 1e3;
      const double flat = med(k + 1, &Sample::secondsPerStep) * 1e3;
      const double per = med(k + 2, &Sample::secondsPerStep) * 1e3;
      const double cycles = med(k, &Sample::cyclesPerStep);
      const double calls = med(k, &Sample::backendCallsPerStep);
      const std::string& b = methods[k].backend;
      overFlat[set.name][b] = kolo / flat;
      fmt::print(
          "{:<11} {:>7} {:>8.1f} {:<7} {:>9.2f} {:>9.2f} {:>11.2f} {:>10.2f} {:>16.2f} "
          "{:>12.1f} {:>13.1f}\n",
          set.name, set.shapes.size(), mb, b, kolo, flat, per, kolo / flat, kolo / per, cycles,
          calls);
      if (csv) {
        fmt::print(csv, "{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.2f},{:.2f},{}\n",
                   set.name, set.shapes.size(), set.numel() * sizeof(float), b, kolo, flat, per,
                   kolo / flat, kolo / per, cycles, calls, opt.trials);
      }
    }
    std::fflush(stdout);
  }
  file.reset();
  if (job.rank() != 0) return 0;

  // The targets, as ratios of this run.
  auto target = [&](const std::string& set, const std::string& backend, double bound,
                    const char* floor) {
    if (!overFlat.count(set) || !overFlat[set].count(backend)) return;
    const double r = overFlat[set][backend];
    fmt::print("target: {} on {}: kolo / {} = {:.2f} (target <= {}): {}\n", set, backend, floor, r,
               bound, r <= bound ? "met" : "NOT met");
  };
  target("resnet50", "mpi", 0.6, "one raw MPI_Allreduce of the same bytes");
  target("resnet50", "gloo", 1.15, "one raw gloo allreduce of the same bytes");
  target("many-small", "mpi", 2.0, "one flat raw MPI_Allreduce");
  target("many-small", "gloo", 2.0, "one flat raw gloo allreduce");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return kolo::bench::runMpiMain(argc, argv, run); }
