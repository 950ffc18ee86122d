#include "execution/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/reduce.h"
#include "kolo/error.h"

namespace kolo {
namespace {

// How one element of each floating dtype is read and written in float64.
struct Float32 {
  using Storage = float;
  static double load(float v) { return v; }
  static float store(double v) { return static_cast<float>(v); }
};
struct Float64 {
  using Storage = double;
  static double load(double v) { return v; }
  static double store(double v) { return v; }
};
struct Float16 {
  using Storage = uint16_t;
  static double load(uint16_t v) { return halfToFloat(v); }
  static uint16_t store(double v) { return floatToHalf(static_cast<float>(v)); }
};
struct BFloat16 {
  using Storage = uint16_t;
  static double load(uint16_t v) { return bfloat16ToFloat(v); }
  static uint16_t store(double v) { return floatToBfloat16(static_cast<float>(v)); }
};

// One combination: a <- adasum(a, b).
struct Pair {
  int left;
  int right;
};

// The tree, level by level: first the fold of ranks p..size-1 onto 0..size-p-1
// (p the largest power of two <= size), then (0,1),(2,3),... then
// (0,2),(4,6),... up to (0,p/2).
std::vector<std::vector<Pair>> schedule(int size) {
  int p = 1;
  while (p * 2 <= size) p *= 2;
  std::vector<std::vector<Pair>> levels;
  if (p < size) {
    levels.emplace_back();
    for (int i = 0; i + p < size; ++i) levels.back().push_back({i, p + i});
  }
  for (int step = 1; step < p; step *= 2) {
    levels.emplace_back();
    for (int k = 0; k + step < p; k += 2 * step) levels.back().push_back({k, k + step});
  }
  return levels;
}

// The part of tensor `tensor` that lies in this rank's slice.
struct Segment {
  size_t tensor;
  size_t begin;  // in elements from the slice start
  size_t length;
};

std::vector<Segment> segmentsOf(const std::vector<size_t>& counts, size_t sliceBegin,
                                size_t sliceLength) {
  std::vector<Segment> out;
  size_t offset = 0;
  const size_t sliceEnd = sliceBegin + sliceLength;
  for (size_t t = 0; t < counts.size(); ++t) {
    const size_t lo = std::max(offset, sliceBegin);
    const size_t hi = std::min(offset + counts[t], sliceEnd);
    if (lo < hi) out.push_back({t, lo - sliceBegin, hi - lo});
    offset += counts[t];
  }
  return out;
}

// a.b, |a|^2, |b|^2 of the segments of every pair of this level, added into
// partials (pair-major, then tensor, then the three sums).
template <typename Traits>
void partialSums(const char* work, size_t sliceLength, const std::vector<Pair>& pairs,
                 const std::vector<Segment>& segments, size_t numTensors, double* partials) {
  using T = typename Traits::Storage;
  const T* base = reinterpret_cast<const T*>(work);
  for (size_t k = 0; k < pairs.size(); ++k) {
    const T* a = base + static_cast<size_t>(pairs[k].left) * sliceLength;
    const T* b = base + static_cast<size_t>(pairs[k].right) * sliceLength;
    for (const Segment& s : segments) {
      double dot = 0, aa = 0, bb = 0;
      for (size_t i = s.begin; i < s.begin + s.length; ++i) {
        const double x = Traits::load(a[i]);
        const double y = Traits::load(b[i]);
        dot += x * y;
        aa += x * x;
        bb += y * y;
      }
      double* out = partials + (k * numTensors + s.tensor) * 3;
      out[0] += dot;
      out[1] += aa;
      out[2] += bb;
    }
  }
}

// a <- ca * a + cb * b per segment, with the coefficients of its tensor.
template <typename Traits>
void combine(char* work, size_t sliceLength, const std::vector<Pair>& pairs,
             const std::vector<Segment>& segments, size_t numTensors, const double* sums) {
  using T = typename Traits::Storage;
  static const double kTiny = std::sqrt(DBL_MIN);
  T* base = reinterpret_cast<T*>(work);
  for (size_t k = 0; k < pairs.size(); ++k) {
    T* a = base + static_cast<size_t>(pairs[k].left) * sliceLength;
    const T* b = base + static_cast<size_t>(pairs[k].right) * sliceLength;
    for (const Segment& s : segments) {
      const double* sum = sums + (k * numTensors + s.tensor) * 3;
      const double dot = sum[0];
      const double ca = sum[1] >= kTiny ? 1.0 - dot / sum[1] * 0.5 : 1.0;
      const double cb = sum[2] >= kTiny ? 1.0 - dot / sum[2] * 0.5 : 1.0;
      for (size_t i = s.begin; i < s.begin + s.length; ++i) {
        a[i] = Traits::store(ca * Traits::load(a[i]) + cb * Traits::load(b[i]));
      }
    }
  }
}

template <typename Traits>
void runTree(comm::Collectives& collectives, char* work, size_t sliceLength,
             const std::vector<Segment>& segments, size_t numTensors, int size,
             std::vector<double>& partials) {
  for (const std::vector<Pair>& pairs : schedule(size)) {
    partials.assign(pairs.size() * numTensors * 3, 0.0);
    partialSums<Traits>(work, sliceLength, pairs, segments, numTensors, partials.data());
    // Every rank holds a different slice: the sums over all of them are the
    // whole tensors' dot products and norms.
    collectives.allreduce(partials.data(), partials.size(), DataType::kFloat64, ReduceOp::kSum);
    combine<Traits>(work, sliceLength, pairs, segments, numTensors, partials.data());
  }
}

}  // namespace

void Adasum::allreduce(comm::Collectives& collectives, void* buf, const std::vector<size_t>& counts,
                       DataType dtype, int rank, int size) {
  KOLO_CHECK_ARG(isFloatingPoint(dtype),
                 std::string("Adasum needs a floating-point tensor, got ") + toString(dtype));
  size_t total = 0;
  for (size_t c : counts) total += c;
  if (size == 1 || total == 0) return;
  const size_t es = elementSize(dtype);

  // Slice r (rows split as evenly as possible, the first ranks taking one
  // more) is combined by rank r.
  std::vector<size_t> slices(size, total / size);
  for (size_t r = 0; r < total % static_cast<size_t>(size); ++r) ++slices[r];
  size_t sliceBegin = 0;
  for (int r = 0; r < rank; ++r) sliceBegin += slices[r];
  const size_t sliceLength = slices[rank];

  work_.resize(std::max<size_t>(1, static_cast<size_t>(size) * sliceLength * es));
  const std::vector<size_t> receive(size, sliceLength);
  collectives.alltoallv(buf, slices, work_.data(), receive, dtype);

  const std::vector<Segment> segments = segmentsOf(counts, sliceBegin, sliceLength);
  char* work = work_.data();
  switch (dtype) {
    case DataType::kFloat32:
      runTree<Float32>(collectives, work, sliceLength, segments, counts.size(), size, partials_);
      break;
    case DataType::kFloat64:
      runTree<Float64>(collectives, work, sliceLength, segments, counts.size(), size, partials_);
      break;
    case DataType::kFloat16:
      runTree<Float16>(collectives, work, sliceLength, segments, counts.size(), size, partials_);
      break;
    case DataType::kBFloat16:
      runTree<BFloat16>(collectives, work, sliceLength, segments, counts.size(), size, partials_);
      break;
    default:
      throw Internal("Adasum: unexpected dtype");
  }
  // The tree's root is rank 0's slot: this rank's slice of the result.
  collectives.allgatherv(work, buf, slices, dtype);
}

}  // namespace kolo
