// Test data for the comm conformance suite: typed buffers whose elements are
// small integers (exact in every kolo dtype, float16 and bfloat16 included),
// input patterns per (dtype, op, rank, index) whose reductions over up to 8
// ranks stay exact, and a reference reduction computed in double.
//
// The half-precision conversions here are the test's own (exact small
// integers only), independent of core/src/reduce.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kolo/types.h"

namespace kolo::test {

extern const DataType kAllDataTypes[kNumDataTypes];
extern const ReduceOp kReduceOps[4];  // sum, min, max, product

// `count` elements of `dtype`, zero-initialised.
class TypedBuffer {
 public:
  TypedBuffer(DataType dtype, size_t count);

  void set(size_t i, double value);
  double get(size_t i) const;

  void* data() { return bytes_.empty() ? nullptr : bytes_.data(); }
  const void* data() const { return bytes_.empty() ? nullptr : bytes_.data(); }
  size_t count() const { return count_; }
  DataType dtype() const { return dtype_; }

 private:
  DataType dtype_;
  size_t count_;
  size_t elementSize_;
  std::vector<char> bytes_;
};

// A TypedBuffer's values copied into a block of shareable memory
// (kolo::allocateShareable, where the direct shm allreduce reduces in place)
// and back. block is null where the process has no arena.
struct ShareableBuffer {
  ShareableBuffer(DataType dtype, size_t count);
  void* data() const { return block.get(); }
  size_t bytes() const;
  void in();   // values -> block
  void out();  // block -> values
  TypedBuffer values;
  std::shared_ptr<void> block;
};

// Input of `rank` at index i for a reduction with `op`.
double reduceInput(DataType dtype, ReduceOp op, int rank, size_t i);

// reduceInput folded over ranks 0..n-1 with op (bool: sum/max = OR,
// min/product = AND).
double reduceExpected(DataType dtype, ReduceOp op, int n, size_t i);

// A small value derived from seed, valid in dtype (for data movement tests).
double dataValue(DataType dtype, size_t seed);

// Throws std::runtime_error("<context>: element i: got X, expected Y") on the
// first element where buf differs from expected(i).
template <typename Expected>
void expectElements(const TypedBuffer& buf, size_t offset, size_t count, const std::string& context,
                    Expected expected);

void failElement(const std::string& context, size_t i, double got, double expected);

template <typename Expected>
void expectElements(const TypedBuffer& buf, size_t offset, size_t count, const std::string& context,
                    Expected expected) {
  for (size_t i = 0; i < count; ++i) {
    const double want = expected(i);
    const double got = buf.get(offset + i);
    if (got != want) failElement(context, offset + i, got, want);
  }
}

}  // namespace kolo::test
