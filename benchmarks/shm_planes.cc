// The shared-memory data plane alone (comm/shm, no engine): allreduce bus
// bandwidth per size against memcpy and a += b, N ranks as forked processes
// of one host, rendezvous through a FileStore in a fresh temporary
// directory.
// For tuning the shm algorithms; the engine-level comparison with MPI and
// Gloo is bench_allreduce_sweep's kolo-shm column.
//
//   bench_shm_planes [--ranks 2] [--min-bytes 4] [--max-bytes 268435456]
//                    [--seconds 0.2] [--trials 3] [--op
//                    allreduce|average|reducescatter|allgather|broadcast]
//
// Per size and trial, memcpy and a += b (every rank at once, a += b with
// the plane's own reduction kernel) and the shm op alternate; the table
// gives the medians over trials. average is allreduceScaled by 1/n, the
// engine's average. a+=b/busbw: how far the op is from the bandwidth of
// one pass of a += b over the buffer (1.0: as fast). busbw as in the sweep
// (allreduce: bytes / time * 2(n-1)/n; reducescatter, allgather: bytes /
// time * (n-1)/n; broadcast: bytes / time).
//
// allreduce and average also time the op on buffers from
// kolo::allocateShareable (as the reducer's gradient buckets), which the
// plane reduces in place from kDirectBytes on ("direct us"; op/direct: the
// time of the op on ordinary buffers over it).
#include <fmt/core.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "comm/shm/collectives.h"
#include "comm/shm/group.h"
#include "common.h"
#include "kernels/reduce.h"
#include "kolo/shareable.h"
#include "kolo/store.h"

namespace {

using kolo::bench::Clock;
using kolo::bench::secondsSince;

struct Options {
  int ranks = 2;
  size_t minBytes = 4;
  size_t maxBytes = size_t(256) << 20;
  double seconds = 0.2;
  int trials = 3;
  std::string op = "allreduce";
  size_t slotKib = kolo::comm::shm::kDataSlotBytes >> 10;
};

// One rank: times memcpy and the op per size; rank 0 prints.
int runRank(const Options& opt, int rank, const std::string& dir) {
  kolo::Config config = kolo::Config::fromEnv();
  config.timeout = std::chrono::seconds(60);
  kolo::Identity id;
  id.rank = rank;
  id.size = opt.ranks;
  auto store = kolo::makeFileStore(dir);
  auto c = std::make_unique<kolo::comm::shm::Collectives>(kolo::comm::shm::Group::connect(
      kolo::comm::BackendArgs{config, id, store, ""}, opt.slotKib << 10, "data", {},
      /*shareArena=*/true));
  const int n = opt.ranks;
  std::vector<float> buf(opt.maxBytes / 4 + 16, 1.0f), other(opt.maxBytes / 4 + 16, 0.0f);
  std::vector<size_t> sizes;
  for (size_t b = std::max<size_t>(opt.minBytes, 4); b <= opt.maxBytes; b *= 4) sizes.push_back(b);
  // One float allreduce: ranks agree on a number (max of their estimates).
  auto agree = [&](double v) {
    float x = static_cast<float>(v);
    c->allreduce(&x, 1, kolo::DataType::kFloat32, kolo::ReduceOp::kMax);
    return static_cast<double>(x);
  };
  const bool timesDirect = opt.op == "allreduce" || opt.op == "average";
  std::shared_ptr<void> shareable = timesDirect ? kolo::allocateShareable(opt.maxBytes) : nullptr;
  if (timesDirect && shareable == nullptr) {
    fmt::print(stderr, "rank {}: no shareable memory (the plane made no arena)\n", rank);
    return 1;
  }
  float* const direct = static_cast<float*>(shareable.get());
  // The op on ordinary buffers, or on the shareable one (direct).
  auto runOp = [&](size_t bytes, bool onShareable = false) {
    const size_t count = bytes / 4;
    float* const data = onShareable ? direct : buf.data();
    if (opt.op == "allreduce") {
      c->allreduce(data, count, kolo::DataType::kFloat32, kolo::ReduceOp::kSum);
    } else if (opt.op == "average") {
      c->allreduceScaled(data, count, kolo::DataType::kFloat32, kolo::ReduceOp::kSum, 1.0 / n);
    } else if (opt.op == "reducescatter") {
      std::vector<size_t> counts(n, count / n);
      counts[0] += count % n;
      c->reducescatter(buf.data(), other.data(), counts, kolo::DataType::kFloat32,
                       kolo::ReduceOp::kSum);
    } else if (opt.op == "allgather") {
      std::vector<size_t> counts(n, count / n);
      counts[0] += count % n;
      c->allgatherv(buf.data(), other.data(), counts, kolo::DataType::kFloat32);
    } else {
      c->broadcast(buf.data(), count, kolo::DataType::kFloat32, 0);
    }
  };
  const double factor = opt.op == "allreduce" || opt.op == "average" ? 2.0 * (n - 1) / n
                        : opt.op == "broadcast" ? 1.0
                                                : double(n - 1) / n;
  if (rank == 0) {
    fmt::print("shm {} float32, {} ranks (processes), slots of {} KiB, median of {} trials\n",
               opt.op, n, opt.slotKib, opt.trials);
    fmt::print("{:<9} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10}", "size", "memcpy GB/s",
               "a+=b GB/s", "busbw GB/s", "us per call", "busbw/mcpy", "a+=b/busbw");
    if (timesDirect) fmt::print(" {:>12} {:>10}", "direct us", "op/direct");
    fmt::print("\n");
  }
  // Seconds per call of fn, every rank at once: calibrated to about
  // opt.seconds, with the same number of calls on every rank.
  auto timeIt = [&](const auto& fn) {
    auto start = Clock::now();
    fn();
    const int calls = static_cast<int>(
        agree(std::clamp(opt.seconds / std::max(secondsSince(start), 1e-9), 3.0, 100000.0)));
    agree(0);
    start = Clock::now();
    for (int i = 0; i < calls; ++i) {
      fn();
      asm volatile("" : : "r"(other.data()) : "memory");
    }
    return secondsSince(start) / calls;
  };
  for (size_t bytes : sizes) {
    std::vector<double> copyTimes, addTimes, opTimes, directTimes;
    for (int t = 0; t < opt.trials; ++t) {
      runOp(bytes);
      copyTimes.push_back(timeIt([&] { std::memcpy(other.data(), buf.data(), bytes); }));
      // a += b with the reduction kernel the plane uses.
      addTimes.push_back(timeIt([&] {
        kolo::reduceElements(other.data(), other.data(), buf.data(), bytes / 4,
                             kolo::DataType::kFloat32, kolo::ReduceOp::kSum);
      }));
      opTimes.push_back(timeIt([&] { runOp(bytes); }));
      if (timesDirect) {
        std::fill(direct, direct + bytes / 4, 1.0f);
        directTimes.push_back(timeIt([&] { runOp(bytes, true); }));
      }
      std::fill(buf.begin(), buf.end(), 1.0f);  // sums must not overflow to inf
      std::fill(other.begin(), other.end(), 0.0f);
    }
    const double copy = kolo::bench::median(copyTimes), op = kolo::bench::median(opTimes);
    const double copyGbps = bytes / copy / 1e9, busbw = bytes / op * factor / 1e9;
    const double addGbps = bytes / kolo::bench::median(addTimes) / 1e9;
    if (rank == 0) {
      fmt::print("{:<9} {:>12.2f} {:>12.2f} {:>12.2f} {:>12.1f} {:>10.2f} {:>10.2f}",
                 kolo::bench::bytesLabel(bytes), copyGbps, addGbps, busbw, op * 1e6,
                 busbw / copyGbps, addGbps / busbw);
      if (timesDirect) {
        const double d = kolo::bench::median(directTimes);
        fmt::print(" {:>12.1f} {:>10.2f}", d * 1e6, op / d);
      }
      fmt::print("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"shared-memory data plane alone: busbw per size vs memcpy"};
  app.add_option("--ranks", opt.ranks, "ranks (forked processes)")->check(CLI::Range(1, 64));
  app.add_option("--min-bytes", opt.minBytes, "smallest size (bytes)");
  app.add_option("--max-bytes", opt.maxBytes, "largest size (bytes)");
  app.add_option("--seconds", opt.seconds, "timed seconds per size, method and trial (about)");
  app.add_option("--trials", opt.trials, "trials")->check(CLI::PositiveNumber);
  app.add_option("--slot-kib", opt.slotKib, "slot per rank in KiB (two halves; default: kolo's)")
      ->check(CLI::Range(4, 1 << 20));
  app.add_option("--op", opt.op, "allreduce|average|reducescatter|allgather|broadcast")
      ->check(CLI::IsMember({"allreduce", "average", "reducescatter", "allgather", "broadcast"}));
  CLI11_PARSE(app, argc, argv);

  char templ[] = "/tmp/kolo-shm-bench-XXXXXX";
  if (mkdtemp(templ) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = templ;
  std::vector<pid_t> children;
  for (int r = 1; r < opt.ranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = runRank(opt, r, dir);
      } catch (const std::exception& e) {
        fmt::print(stderr, "rank {}: {}\n", r, e.what());
      }
      std::_Exit(rc);
    }
    children.push_back(pid);
  }
  int status = 0;
  try {
    status = runRank(opt, 0, dir);
  } catch (const std::exception& e) {
    fmt::print(stderr, "rank 0: {}\n", e.what());
    status = 1;
  }
  for (pid_t pid : children) {
    int s = 0;
    waitpid(pid, &s, 0);
    if (!WIFEXITED(s) || WEXITSTATUS(s) != 0) status = 1;
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return status;
}
