// Collectives conformance: every op against a reference computed here, for
// every dtype and reduce op, over uneven counts including zeros. Large counts
// run for a few (dtype, op) pairs only, to keep the suite fast on 2 cores.
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "comm/conformance.h"
#include "comm/test_values.h"
#include "kernels/reduce.h"
#include "kolo/error.h"

namespace kolo::test {
namespace {

std::string where(const char* op, DataType dtype, int n, int rank, const std::string& detail) {
  return std::string(op) + " " + toString(dtype) + " (" + detail + ") with " + std::to_string(n) +
         " ranks, on rank " + std::to_string(rank);
}

std::vector<size_t> offsetsOf(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  return offsets;
}

size_t sum(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t(0));
}

// Per-rank counts for the v-collectives: zeros, uneven, one-sided.
std::vector<std::vector<size_t>> countPatterns(int n) {
  std::vector<std::vector<size_t>> patterns(4, std::vector<size_t>(n));
  for (int r = 0; r < n; ++r) {
    patterns[0][r] = 0;                                   // all empty
    patterns[1][r] = static_cast<size_t>(r * 5 + 3) % 7;  // uneven, r=5 empty
    patterns[2][r] = r == n - 1 ? 1027 : 0;               // one rank only
    patterns[3][r] = r == 0 ? 0 : static_cast<size_t>(r) * 3 + 1;
  }
  return patterns;
}

// NCCL has no 16-bit integer type: it must refuse int16 reductions (on
// every rank, before any communication) instead of reducing them wrongly.
bool refusesInt16Reduction(const comm::Collectives& c, DataType dtype) {
  return dtype == DataType::kInt16 && std::string(c.name()) == "nccl";
}

void checkAllreduce(comm::Collectives& c, int rank, int n, DataType dtype, ReduceOp op,
                    size_t count) {
  TypedBuffer buf(dtype, count);
  for (size_t i = 0; i < count; ++i) buf.set(i, reduceInput(dtype, op, rank, i));
  if (refusesInt16Reduction(c, dtype)) {
    EXPECT_THROW(c.allreduce(buf.data(), count, dtype, op), InvalidArgument);
    return;
  }
  c.allreduce(buf.data(), count, dtype, op);
  expectElements(buf, 0, count,
                 where("allreduce", dtype, n, rank,
                       std::string(toString(op)) + ", " + std::to_string(count) + " elements"),
                 [&](size_t i) { return reduceExpected(dtype, op, n, i); });
}

void checkAllgatherv(comm::Collectives& c, int rank, int n, DataType dtype,
                     const std::vector<size_t>& counts) {
  TypedBuffer in(dtype, counts[rank]);
  for (size_t i = 0; i < in.count(); ++i) in.set(i, dataValue(dtype, rank * 1000 + i));
  TypedBuffer out(dtype, sum(counts));
  c.allgatherv(in.data(), out.data(), counts, dtype);
  const auto offsets = offsetsOf(counts);
  for (int r = 0; r < n; ++r) {
    expectElements(out, offsets[r], counts[r],
                   where("allgatherv", dtype, n, rank, "block of rank " + std::to_string(r)),
                   [&](size_t j) { return dataValue(dtype, r * 1000 + j); });
  }
}

void checkReducescatter(comm::Collectives& c, int rank, int n, DataType dtype, ReduceOp op,
                        const std::vector<size_t>& counts) {
  const size_t total = sum(counts);
  TypedBuffer in(dtype, total);
  for (size_t i = 0; i < total; ++i) in.set(i, reduceInput(dtype, op, rank, i));
  TypedBuffer out(dtype, counts[rank]);
  if (refusesInt16Reduction(c, dtype)) {
    EXPECT_THROW(c.reducescatter(in.data(), out.data(), counts, dtype, op), InvalidArgument);
    return;
  }
  c.reducescatter(in.data(), out.data(), counts, dtype, op);
  const size_t offset = offsetsOf(counts)[rank];
  expectElements(out, 0, counts[rank],
                 where("reducescatter", dtype, n, rank,
                       std::string(toString(op)) + ", " + std::to_string(counts[rank]) + " of " +
                           std::to_string(total) + " elements"),
                 [&](size_t j) { return reduceExpected(dtype, op, n, offset + j); });
}

// Elements rank a sends to rank b in pattern k.
size_t alltoallCount(int a, int b, int k) {
  if (k == 0) return 0;
  if (k == 1) return a == 0 ? 5 : 0;  // one sender, ranks with nothing at all
  return static_cast<size_t>(a * 2 + b * 3 + k) % 4;
}

void checkAlltoallv(comm::Collectives& c, int rank, int n, DataType dtype, int k) {
  std::vector<size_t> sendCounts(n), recvCounts(n);
  for (int r = 0; r < n; ++r) {
    sendCounts[r] = alltoallCount(rank, r, k);
    recvCounts[r] = alltoallCount(r, rank, k);
  }
  auto seed = [](int from, int to, size_t j) { return from * 97 + to * 13 + j; };
  TypedBuffer in(dtype, sum(sendCounts));
  const auto sendOffsets = offsetsOf(sendCounts);
  for (int r = 0; r < n; ++r) {
    for (size_t j = 0; j < sendCounts[r]; ++j) {
      in.set(sendOffsets[r] + j, dataValue(dtype, seed(rank, r, j)));
    }
  }
  TypedBuffer out(dtype, sum(recvCounts));
  c.alltoallv(in.data(), sendCounts, out.data(), recvCounts, dtype);
  const auto recvOffsets = offsetsOf(recvCounts);
  for (int r = 0; r < n; ++r) {
    expectElements(out, recvOffsets[r], recvCounts[r],
                   where("alltoallv", dtype, n, rank,
                         "pattern " + std::to_string(k) + ", block from rank " + std::to_string(r)),
                   [&](size_t j) { return dataValue(dtype, seed(r, rank, j)); });
  }
}

void checkBroadcast(comm::Collectives& c, int rank, int n, DataType dtype, int root, size_t count) {
  TypedBuffer buf(dtype, count);
  for (size_t i = 0; i < count; ++i) {
    buf.set(i, dataValue(dtype, rank == root ? root * 7 + i : root * 7 + i + 1));
  }
  c.broadcast(buf.data(), count, dtype, root);
  expectElements(buf, 0, count,
                 where("broadcast", dtype, n, rank,
                       "root " + std::to_string(root) + ", " + std::to_string(count) + " elements"),
                 [&](size_t i) { return dataValue(dtype, root * 7 + i); });
}

TEST_P(CollectivesConformance, Name) {
  runCollectives(backend(), worldSize(),
                 [](int, comm::Collectives& c) { EXPECT_NE(std::string(c.name()), ""); });
}

TEST_P(CollectivesConformance, AllreduceEveryDtypeAndOp) {
  const int n = worldSize();
  runCollectives(backend(), n, [n](int rank, comm::Collectives& c) {
    for (DataType dtype : kAllDataTypes) {
      for (ReduceOp op : kReduceOps) {
        for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1024 + 3)}) {
          checkAllreduce(c, rank, n, dtype, op, count);
        }
      }
    }
  });
}

TEST_P(CollectivesConformance, AllreduceLarge) {
  const int n = worldSize();
  runCollectives(backend(), n, [n](int rank, comm::Collectives& c) {
    const size_t count = size_t(1) << 18;
    checkAllreduce(c, rank, n, DataType::kFloat32, ReduceOp::kSum, count);
    checkAllreduce(c, rank, n, DataType::kBFloat16, ReduceOp::kMax, count);
    if (n > 4) return;  // the rest only on small worlds
    checkAllreduce(c, rank, n, DataType::kFloat16, ReduceOp::kSum, count);
    checkAllreduce(c, rank, n, DataType::kInt64, ReduceOp::kProduct, count);
    checkAllreduce(c, rank, n, DataType::kUInt8, ReduceOp::kMin, count);
  });
}

// allreduceScaled (the engine's average) gives bit for bit what allreduce
// then scaleElements give, on inputs whose sums round: a plane that folds
// the multiply into its reduction must round as the separate pass does.
void checkAllreduceScaled(comm::Collectives& c, int rank, int n, DataType dtype, ReduceOp op,
                          double factor, size_t count) {
  TypedBuffer expected(dtype, count);
  const bool half = dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
  for (size_t i = 0; i < count; ++i) {
    const double v = static_cast<double>((i * 7 + static_cast<size_t>(rank) * 13) % 101);
    expected.set(i, half ? v - 50.0 : v / 7.0 - 5.0);
  }
  TypedBuffer got = expected;
  c.allreduce(expected.data(), count, dtype, op);
  scaleElements(expected.data(), count, dtype, factor);
  c.allreduceScaled(got.data(), count, dtype, op, factor);
  const size_t es = elementSize(dtype);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(static_cast<const char*>(got.data()) + i * es,
                    static_cast<const char*>(expected.data()) + i * es, es) != 0) {
      failElement(where("allreduceScaled", dtype, n, rank,
                        std::string(toString(op)) + ", factor " + std::to_string(factor) + ", " +
                            std::to_string(count) + " elements"),
                  i, got.get(i), expected.get(i));
    }
  }
}

TEST_P(CollectivesConformance, AllreduceScaledIsAllreduceThenScaleBitForBit) {
  const int n = worldSize();
  runCollectives(backend(), n, [n](int rank, comm::Collectives& c) {
    for (DataType dtype :
         {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        for (double factor : {1.0 / n, 0.1, 1.0}) {
          for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1024 + 3)}) {
            checkAllreduceScaled(c, rank, n, dtype, op, factor, count);
          }
        }
      }
    }
    // Several pipeline steps of the shm plane, with a short last chunk (on
    // small worlds only, to keep the suite fast on 2 cores).
    if (n > 4) return;
    checkAllreduceScaled(c, rank, n, DataType::kFloat32, ReduceOp::kSum, 1.0 / n,
                         (size_t(1) << 20) + 5);
  });
}

TEST_P(CollectivesConformance, AllgathervUnevenCounts) {
  const int n = worldSize();
  runCollectives(backend(), n, [n](int rank, comm::Collectives& c) {
    for (const auto& counts : countPatterns(n)) {
      for (DataType dtype : kAllDataTypes) checkAllgatherv(c, rank, n, dtype, counts);
    }
    std::vector<size_t> large(n);
    for (int r = 0; r < n; ++r) large[r] = (size_t(1) << 18) / n + r;
    checkAllgatherv(c, rank, n, DataType::kFloat64, large);
  });
}

TEST_P(CollectivesConformance, BroadcastEveryRoot) {
  const int n = worldSize();
  runCollectives(backend(), n, [n](int rank, comm::Collectives& c) {
    for (int root = 0; root < n; ++root) {
      for (DataType dtype : kAllDataTypes) {
        for (size_t count : {size_t(0), size_t(1), size_t(1024 + 3)}) {
          checkBroadcast(c, rank, n, dtype, root, count);
        }
      }
    }
    checkBroadcast(c, rank, n, DataType::kInt32, n - 1, size_t(1) << 18);
  });
}

TEST_P(CollectivesConformance, AlltoallvUnevenCounts) {
  const int n = worldSize();
  runCollectives(backend(), n, [n](int rank, comm::Collectives& c) {
    for (int k = 0; k < 4; ++k) {
      for (DataType dtype : kAllDataTypes) checkAlltoallv(c, rank, n, dtype, k);
    }
  });
}

TEST_P(CollectivesConformance, ReducescatterUnevenCounts) {
  const int n = worldSize();
  runCollectives(backend(), n, [n](int rank, comm::Collectives& c) {
    for (const auto& counts : countPatterns(n)) {
      for (DataType dtype : kAllDataTypes) {
        for (ReduceOp op : kReduceOps) checkReducescatter(c, rank, n, dtype, op, counts);
      }
    }
    std::vector<size_t> large(n);
    for (int r = 0; r < n; ++r) large[r] = (size_t(1) << 18) / n + (r % 2 ? 3 : 0);
    checkReducescatter(c, rank, n, DataType::kFloat32, ReduceOp::kSum, large);
  });
}

// Different collectives back to back, as the engine issues them: a backend
// that mixes up messages of consecutive calls fails here.
TEST_P(CollectivesConformance, MixedSequence) {
  const int n = worldSize();
  runCollectives(backend(), n, [n](int rank, comm::Collectives& c) {
    const std::vector<size_t> uneven = countPatterns(n)[1];
    for (int iter = 0; iter < 10; ++iter) {
      const DataType dtype = kAllDataTypes[iter % kNumDataTypes];
      const ReduceOp op = kReduceOps[iter % 4];
      checkAllreduce(c, rank, n, dtype, op, 1 + iter * 37);
      checkBroadcast(c, rank, n, dtype, iter % n, 5 + iter);
      checkAlltoallv(c, rank, n, dtype, 2 + iter % 2);
      checkAllgatherv(c, rank, n, dtype, uneven);
      checkReducescatter(c, rank, n, dtype, op, uneven);
      checkAllreduce(c, rank, n, dtype, op, 0);
    }
  });
}

}  // namespace
}  // namespace kolo::test
