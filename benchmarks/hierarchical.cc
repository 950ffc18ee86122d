// Hierarchical vs flat allreduce across hosts, on real gradient sets: kolo
// with two-level collectives (shared memory within a host, Gloo across), kolo
// flat (Gloo over every rank), and one raw flat gloo::allreduce of the set's
// total bytes (what flat Gloo can do at best: no per-tensor cost). Run under
// kolorun on several hosts with the same number of ranks each
// (benchmarks/hierarchical.sh makes two network-namespace hosts with
// rate-limited links and runs it):
//
//   kolorun -H HOST1:2,HOST2:2 build/bench/benchmarks/bench_hierarchical
//       --set resnet50=benchmarks/results/shapes-resnet50.csv
//       --set bert-base=benchmarks/results/shapes-bert-base.csv
//       [--methods kolo-hierarchical,kolo-flat,gloo-flat] [--trials 3] [--steps 2]
//       [--iface eth0] [--csv out.csv]
//
// A step enqueues every tensor of the set in reverse order (as backward
// produces gradients) and waits for all; kolo gets 2 warm-up steps, raw Gloo
// 1 (which also checks the sum). Methods take turns in rotating order within
// each trial, each built and torn down around its own block. The table shows
// the median over trials of seconds per step (the slowest rank's) and the
// bytes each host sent per step: the growth of --iface's tx_bytes, read by
// the first rank of each host, control traffic included.
#include <fmt/core.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <exception>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "gloo_store.h"
#include "common.h"
#include "kolo/engine.h"
#include "kolo/tcp_store.h"

namespace {

using kolo::bench::Clock;
using kolo::bench::GlooStore;
using kolo::bench::readShapeFile;
using kolo::bench::Shape;
using kolo::bench::secondsSince;

constexpr std::chrono::seconds kTimeout{300};



// Everyone waits here until all ranks arrived (through the store).
void storeBarrier(kolo::Store& store, const std::string& name, int size) {
  store.add("barrier/" + name, 1);
  const auto deadline = Clock::now() + kTimeout;
  while (store.add("barrier/" + name, 0) < size) {
    if (Clock::now() > deadline) throw std::runtime_error("barrier " + name + " timed out");
    usleep(1000);
  }
}

uint64_t txBytes(const std::string& iface) {
  std::ifstream in("/sys/class/net/" + iface + "/statistics/tx_bytes");
  uint64_t v = 0;
  in >> v;
  return v;
}

struct Result {
  double secondsPerStep = 0;
  double bytesPerStep = 0;  // this rank's host, when it is the host's first rank
};

class Bench {
 public:
  Bench(const kolo::LaunchInfo& launch, std::shared_ptr<kolo::Store> store, std::string iface)
      : id_(launch.identity), store_(std::move(store)), iface_(std::move(iface)) {}

  // One block of `steps` timed steps of method m on the set.
  Result run(const std::string& m, const std::vector<Shape>& shapes, int steps,
             const std::string& tag) {
    const size_t total = std::accumulate(shapes.begin(), shapes.end(), size_t(0),
                                         [](size_t n, const Shape& s) { return n + s.numel; });
    arena_.assign(total, 1.0f);
    std::function<void()> step;
    std::unique_ptr<kolo::Engine> engine;
    std::shared_ptr<::gloo::rendezvous::Context> gloo;
    auto prefixed = std::make_shared<kolo::PrefixStore>(tag + "/", store_);
    if (m == "gloo-flat") {
      ::gloo::transport::tcp::attr attr;
      attr.hostname = kolo::localAddressOf(*store_);
      if (attr.hostname.empty()) attr.hostname = "127.0.0.1";
      auto device = ::gloo::transport::tcp::CreateDevice(attr);
      gloo = std::make_shared<::gloo::rendezvous::Context>(id_.rank, id_.size);
      gloo->setTimeout(kTimeout);
      GlooStore glooStore(prefixed, kTimeout);
      gloo->connectFullMesh(glooStore, device);
      step = [&] {
        ::gloo::AllreduceOptions opts(gloo);
        opts.setOutput(arena_.data(), arena_.size());
        opts.setReduceFunction(kolo::bench::sumFloats);
        opts.setTag(tag_++);
        ::gloo::allreduce(opts);
      };
    } else {
      kolo::Config config = kolo::Config::fromEnv();
      config.logLevel = kolo::LogLevel::kError;
      config.timeout = kTimeout;
      config.hierarchicalAllreduce = m == "kolo-hierarchical";
      config.hierarchicalAllgather = m == "kolo-hierarchical";
      engine = std::make_unique<kolo::Engine>(config, id_, prefixed);
      step = [&] {
        std::vector<kolo::Handle> handles;
        size_t offset = total;
        for (auto it = shapes.rbegin(); it != shapes.rend(); ++it) {
          offset -= it->numel;
          kolo::Request q;
          q.name = it->name;
          q.dtype = kolo::DataType::kFloat32;
          q.shape = it->dims;
          float* p = arena_.data() + offset;
          handles.push_back(engine->enqueue(std::move(q), kolo::Entry{p, p, {}, {}}));
        }
        for (auto& h : handles) h.wait();
      };
    }
    const int warmups = engine ? 2 : 1;
    for (int i = 0; i < warmups; ++i) {
      std::fill(arena_.begin(), arena_.end(), 1.0f);
      step();
      if (arena_[0] != static_cast<float>(id_.size) ||
          arena_.back() != static_cast<float>(id_.size)) {
        throw std::runtime_error(m + ": wrong sum " + std::to_string(arena_[0]));
      }
    }
    storeBarrier(*prefixed, "start", id_.size);
    const uint64_t before = txBytes(iface_);
    const auto start = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double seconds = secondsSince(start) / steps;
    const uint64_t after = txBytes(iface_);
    storeBarrier(*prefixed, "end", id_.size);
    if (engine) engine->shutdown();
    return {seconds, static_cast<double>(after - before) / steps};
  }

 private:
  kolo::Identity id_;
  std::shared_ptr<kolo::Store> store_;
  std::string iface_;
  std::vector<float> arena_;
  uint32_t tag_ = 1;
};

// Every rank's number reaches rank 0 (through the store).
std::vector<double> gather(kolo::Store& store, const std::string& key, double mine,
                           const kolo::Identity& id) {
  const std::string text = fmt::format("{:.9e}", mine);
  store.set(key + "/" + std::to_string(id.rank), std::vector<char>(text.begin(), text.end()));
  std::vector<double> all;
  if (id.rank != 0) return all;
  for (int r = 0; r < id.size; ++r) {
    auto v = store.get(key + "/" + std::to_string(r), kTimeout);
    all.push_back(std::stod(std::string(v.begin(), v.end())));
  }
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> sets;
  std::vector<std::string> methods{"kolo-hierarchical", "kolo-flat", "gloo-flat"};
  int trials = 3;
  int steps = 2;
  std::string iface = "eth0";
  std::string csvPath;
  CLI::App app{"hierarchical vs flat allreduce across hosts (run under kolorun)"};
  app.add_option("--set", sets, "NAME=shapes.csv (repeatable)")->required();
  app.add_option("--methods", methods, "comma-separated methods")->delimiter(',');
  app.add_option("--trials", trials, "alternating trials")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps per method and trial")->check(CLI::PositiveNumber);
  app.add_option("--iface", iface, "interface whose tx_bytes count a host's traffic");
  app.add_option("--csv", csvPath, "write the table here (rank 0)");
  CLI11_PARSE(app, argc, argv);

  try {
    const kolo::LaunchInfo launch = kolo::launchInfoFromEnv();
    const kolo::Identity& id = launch.identity;
    if (launch.rendezvous.addr.empty()) throw std::runtime_error("run me under kolorun");
    auto store = kolo::makeTcpStore(launch.rendezvous.addr, launch.rendezvous.port,
                                    launch.rendezvous.secret);
    Bench bench(launch, store, iface);
    // seconds[set][method] and bytes[set][method][host] per trial.
    std::map<std::string, std::map<std::string, std::vector<double>>> seconds;
    std::map<std::string, std::map<std::string, std::vector<std::vector<double>>>> bytes;
    std::map<std::string, double> megabytes;
    for (const auto& spec : sets) {
      const auto eq = spec.find('=');
      if (eq == std::string::npos) throw std::runtime_error("--set wants NAME=PATH: " + spec);
      const std::string name = spec.substr(0, eq);
      const auto shapes = readShapeFile(spec.substr(eq + 1));
      size_t total = 0;
      for (const auto& s : shapes) total += s.numel;
      megabytes[name] = total * 4 / 1e6;
      for (int t = 0; t < trials; ++t) {
        const int m = static_cast<int>(methods.size());
        for (int i = 0; i < m; ++i) {
          const std::string& method = methods[kolo::bench::turn(i, t, m)];
          const std::string tag = fmt::format("{}.{}.{}", name, method, t);
          Result r = bench.run(method, shapes, steps, tag);
          // The first rank of each host reports its host's bytes; the
          // slowest rank's time is the step time.
          const bool hostLeader = id.localRank == 0;
          auto times = gather(*store, tag + "/seconds", r.secondsPerStep, id);
          auto sent = gather(*store, tag + "/bytes", hostLeader ? r.bytesPerStep : -1, id);
          if (id.rank != 0) continue;
          seconds[name][method].push_back(*std::max_element(times.begin(), times.end()));
          std::vector<double> perHost;
          for (double b : sent) {
            if (b >= 0) perHost.push_back(b);
          }
          bytes[name][method].push_back(perHost);
          fmt::print("  {} {} trial {}: {:.3f} s per step\n", name, method, t + 1,
                     seconds[name][method].back());
          std::fflush(stdout);
        }
      }
    }
    if (id.rank != 0) return 0;
    const int hosts = id.crossSize;
    fmt::print("\nallreduce of gradient sets, {} ranks on {} hosts, median of {} trials\n", id.size,
               hosts, trials);
    fmt::print("{:<10} {:>8} {:<18} {:>10} {:>22}\n", "set", "MB", "method", "s/step",
               "MB sent per host/step");
    // One row per set (as the plot reads it): seconds per step and MB sent
    // per host per step (mean over hosts) of each method, and the speedups.
    const std::vector<std::string> kAll{"kolo-hierarchical", "kolo-flat", "gloo-flat"};
    auto file = csvPath.empty() ? kolo::bench::OutputFile(nullptr, &std::fclose)
                                : kolo::bench::openForWriting(csvPath);
    if (file) {
      fmt::print(file.get(),
                 "set,megabytes,ranks,hosts,trials,hierarchical_s,flat_s,gloo_flat_s,"
                 "hierarchical_mb_per_host,flat_mb_per_host,gloo_flat_mb_per_host,"
                 "flat_over_hierarchical,gloo_flat_over_hierarchical\n");
    }
    for (const auto& [set, byMethod] : seconds) {
      std::map<std::string, double> stepSeconds, sentMb;
      for (const auto& method : methods) {
        const double s = kolo::bench::median(byMethod.at(method));
        // Per host: median over trials; the table shows every host's.
        std::string sent;
        double sentMean = 0;
        for (int h = 0; h < hosts; ++h) {
          std::vector<double> v;
          for (const auto& trial : bytes[set][method]) {
            if (h < static_cast<int>(trial.size())) v.push_back(trial[h]);
          }
          const double mb = v.empty() ? 0 : kolo::bench::median(v) / 1e6;
          sentMean += mb / hosts;
          sent += (h ? " / " : "") + fmt::format("{:.0f}", mb);
        }
        stepSeconds[method] = s;
        sentMb[method] = sentMean;
        fmt::print("{:<10} {:>8.1f} {:<18} {:>10.3f} {:>22}\n", set, megabytes[set], method, s,
                   sent);
      }
      auto cell = [](const std::map<std::string, double>& m, const std::string& k) {
        return m.count(k) ? fmt::format("{:.6g}", m.at(k)) : std::string("nan");
      };
      auto ratio = [&](const std::string& other) {
        if (!stepSeconds.count(other) || !stepSeconds.count("kolo-hierarchical")) return -1.0;
        return stepSeconds[other] / stepSeconds["kolo-hierarchical"];
      };
      for (const char* other : {"kolo-flat", "gloo-flat"}) {
        const double r = ratio(other);
        if (r < 0) continue;
        fmt::print("target: {} hierarchical kolo {:.2f}x faster than {} (target >= 1.5): {}\n", set,
                   r, other, r >= 1.5 ? "met" : "NOT met");
      }
      if (file) {
        fmt::print(file.get(), "{},{:.1f},{},{},{}", set, megabytes[set], id.size, hosts, trials);
        for (const auto& m : kAll) fmt::print(file.get(), ",{}", cell(stepSeconds, m));
        for (const auto& m : kAll) fmt::print(file.get(), ",{}", cell(sentMb, m));
        fmt::print(file.get(), ",{:.4g},{:.4g}\n", ratio("kolo-flat"), ratio("gloo-flat"));
      }
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_hierarchical: {}\n", e.what());
    return 1;
  }
}
