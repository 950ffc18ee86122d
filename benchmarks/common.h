// Helpers shared by the benchmarks: timing statistics, size labels, the
// engine configuration they all use, and the order in which compared methods
// take turns within a run.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kolo/config.h"

namespace kolo::bench {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// p in [0, 1]; nearest-rank on a sorted copy. v must not be empty.
double percentile(std::vector<double> v, double p);
inline double median(const std::vector<double>& v) { return percentile(v, 0.5); }

// "4 B", "16 KiB", "256 MiB": binary units, as the sizes are powers of two.
std::string bytesLabel(size_t bytes);

// Config::fromEnv() (so KOLO_* variables still apply: KOLO_CYCLE_TIME,
// KOLO_FUSION_THRESHOLD, ...) with controller and CPU operations set to
// backend ("gloo" or "mpi", shared memory off) or, for "shm", kolo's
// default on one host (shared memory), and logging reduced to errors.
kolo::Config engineConfig(const std::string& backend);

// Which method runs at position i of trial t: a rotation, so no method is
// always first (or always right after a particular other one) in a block.
inline int turn(int i, int trial, int methods) { return (i + trial) % methods; }

// A file opened for writing (results CSV), closed when it goes out of scope.
// Throws std::runtime_error("cannot write PATH: <reason>") when it cannot be
// created.
using OutputFile = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;
OutputFile openForWriting(const std::string& path);

// Gloo reduce function for float32 sum (what an application would pass).
void sumFloats(void* out, const void* a, const void* b, size_t n);

// One tensor of a model's gradient set (benchmarks/results/shapes-*.csv).
struct Shape {
  std::string name;
  std::vector<int64_t> dims;
  size_t numel = 0;
};

// The rows of a shape file: a header, then "name,AxBxC,numel" per tensor.
// Throws std::runtime_error naming the file when it is missing or empty.
std::vector<Shape> readShapeFile(const std::string& path);

}  // namespace kolo::bench
