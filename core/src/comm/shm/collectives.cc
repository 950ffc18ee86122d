#include "comm/shm/collectives.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "comm/shm/copy.h"
#include "kernels/reduce.h"
#include "kolo/error.h"

namespace kolo::comm::shm {
namespace {

constexpr size_t kLine = 64;

void checkReduceOp(ReduceOp op, const char* what) {
  KOLO_CHECK_ARG(op == ReduceOp::kSum || op == ReduceOp::kMin || op == ReduceOp::kMax ||
                     op == ReduceOp::kProduct,
                 std::string("shm ") + what + ": unsupported reduce op " + toString(op));
}

size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

std::vector<size_t> offsetsOf(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  return offsets;
}

// stream: results out of the segment into a caller's buffer of
// kStreamingBytes or more.
void copyBytes(void* dst, const void* src, size_t bytes, bool stream = false) {
  if (bytes == 0) return;
  if (stream) {
    copySharedStreaming(dst, src, bytes);
  } else {
    copyShared(dst, src, bytes);
  }
}

// out = (x(0) op x(1) op ... op x(n-1)) * factor, left to right (rank
// order); out2, when not null, gets the same result in the same pass.
template <typename Input>
void foldInRankOrder(void* out, int n, const Input& x, size_t count, DataType dtype, ReduceOp op,
                     double factor = 1.0, void* out2 = nullptr) {
  if (count == 0) return;
  if (n == 1) {
    if (out != x(0)) copyShared(out, x(0), count * elementSize(dtype));
    scaleElements(out, count, dtype, factor);
    if (out2 != nullptr && out2 != out) copyShared(out2, out, count * elementSize(dtype));
    return;
  }
  for (int k = 1; k < n - 1; ++k) reduceElements(out, k == 1 ? x(0) : out, x(k), count, dtype, op);
  reduceScaledElements(out, out2, n == 2 ? x(0) : out, x(n - 1), count, dtype, op, factor);
}

// Part k of a chunk of len elements: [k * part, (k + 1) * part) clipped to
// len. The part size is the same for every chunk of an operation, so region
// k of a slot half always holds part k: a short last chunk never writes
// where a peer may still read the previous use of that half.
struct Parts {
  Parts(size_t len, size_t part) : len_(len), part_(part) {}
  size_t offset(int k) const { return std::min(len_, static_cast<size_t>(k) * part_); }
  size_t length(int k) const { return std::min(len_, offset(k) + part_) - offset(k); }

 private:
  size_t len_;
  size_t part_;
};

}  // namespace

size_t dataSlotBytes(int ranks) {
  const size_t fair =
      kDataSegmentBytes / static_cast<size_t>(std::max(ranks, 1)) / (64 << 10) * (64 << 10);
  return std::clamp(fair, kMinDataSlotBytes, kDataSlotBytes);
}

Collectives::Collectives(std::unique_ptr<Group> group)
    : group_(std::move(group)),
      halfBytes_(group_->slotBytes() / 2),
      directAt_(static_cast<size_t>(group_->size())) {
  KOLO_ENFORCE(halfBytes_ % kLine == 0 && halfBytes_ >= 2 * kLine * group_->size(),
               "shm: slot too small for the group");
}

void Collectives::begin(const char* what) {
  group_->checkUsable(what);
  group_->waitAll(slotFree_, what);
}

void Collectives::end() {
  group_->publish();
  slotFree_ = group_->phase();
}

void Collectives::checkCounts(const std::vector<size_t>& counts, const char* what) const {
  KOLO_CHECK_ARG(counts.size() == static_cast<size_t>(group_->size()),
                 std::string("shm ") + what + ": " + std::to_string(counts.size()) +
                     " counts for size " + std::to_string(group_->size()));
}

void Collectives::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  allreduceScaled(buf, count, dtype, op, 1.0);
}

void Collectives::allreduceScaled(void* buf, size_t count, DataType dtype, ReduceOp op,
                                  double factor) {
  checkReduceOp(op, "allreduce");
  const size_t es = elementSize(dtype);  // rejects an unknown dtype before any synchronisation
  group_->checkUsable("allreduce");
  if (count == 0) return;
  if (group_->size() == 1) {
    scaleElements(buf, count, dtype, factor);
  } else if (count * es <= std::min(kOneShotBytes, halfBytes_)) {
    oneShotAllreduce(static_cast<char*>(buf), count, dtype, op, factor);
  } else {
    Start start = Start::kFresh;
    if (count * es >= kDirectBytes && groupDirect_ != 0) {
      start = directAllreduce(static_cast<char*>(buf), count, dtype, op, factor);
      if (start == Start::kDone) return;
    }
    pipelinedAllreduce(static_cast<char*>(buf), count, dtype, op, factor, start);
  }
}

void Collectives::oneShotAllreduce(char* buf, size_t count, DataType dtype, ReduceOp op,
                                   double factor) {
  const char* what = "allreduce";
  const int n = group_->size();
  const int me = group_->rank();
  begin(what);
  copyShared(half(me, 0), buf, count * elementSize(dtype));
  group_->publish();
  group_->waitAll(group_->phase(), what);
  // Our own input is read from our slot copy, so buf can take the result.
  foldInRankOrder(
      buf, n, [&](int k) { return half(k, 0); }, count, dtype, op, factor);
  end();
}

// The ranks publish where their buffers lie in their arenas; when every
// rank's does (and every rank mapped every arena), each reduces its part of
// all the buffers in place, and a second synchronisation ends the
// operation. The slots are not used, so the next operation may rewrite
// them once every peer completed that second phase.
Collectives::Start Collectives::directAllreduce(char* buf, size_t count, DataType dtype,
                                                ReduceOp op, double factor) {
  const char* what = "allreduce";
  const int n = group_->size();
  const int me = group_->rank();
  const size_t es = elementSize(dtype);
  const size_t bytes = count * es;
  begin(what);
  const Arena* arena = group_->arena();
  const int64_t mine = arena != nullptr ? arena->offsetOf(buf, bytes) : -1;
  group_->setDirectOffset(mine);
  // A buffer outside the arena cannot be reduced in place: stage the first
  // chunk as the path through the slots does, so that where no rank's
  // buffer is in its arena that path goes on from this publish and the
  // exchange costs no synchronisation of its own.
  if (mine < 0) stageChunk(buf, count, es, pipelineOf(count, es), 0);
  group_->publish();
  group_->waitAll(group_->phase(), what);
  // Every rank reads the same lines here, so every rank decides the same.
  bool capable = true;
  bool direct = true;
  bool staged = true;  // every rank staged its first chunk
  std::vector<char*>& at = directAt_;
  for (int r = 0; r < n; ++r) {
    capable = capable && group_->directCapable(r);
    const int64_t offset = group_->directOffsetOf(r);
    staged = staged && offset < 0;
    const Arena::Mapping& m = group_->arenaOf(r);
    if (offset < 0 || m.base == nullptr || static_cast<size_t>(offset) > m.size ||
        bytes > m.size - static_cast<size_t>(offset)) {
      direct = false;
      continue;
    }
    at[r] = m.base + offset;
  }
  groupDirect_ = capable ? 1 : 0;
  // When every rank is capable, every rank mapped every arena (at its full
  // size), so `direct` depends only on the offsets all of them read: the
  // same decision everywhere.
  if (!capable || !direct) return staged ? Start::kFirstChunkStaged : Start::kBegun;
  // Our part, [p0, p0 + len), of every rank's buffer, in pieces that stay
  // in cache: reduced in rank order into rank 0's buffer (x0 op x1 ...:
  // element i is read before it is written), then copied to the others;
  // with two ranks one pass writes both.
  const size_t lineElements = kLine / es;
  const size_t part = ceilDiv(ceilDiv(count, n), lineElements) * lineElements;
  const size_t p0 = std::min(count, static_cast<size_t>(me) * part);
  const size_t len = std::min(count, p0 + part) - p0;
  const size_t piece = std::max<size_t>(lineElements, (size_t(64) << 10) / es);
  try {
    for (size_t i = 0; i < len; i += piece) {
      const size_t m = std::min(piece, len - i);
      auto x = [&](int r) { return at[r] + (p0 + i) * es; };
      for (int k = 1; k < n - 1; ++k) reduceElements(x(0), x(0), x(k), m, dtype, op);
      reduceScaledElements(x(0), n == 2 ? x(1) : nullptr, x(0), x(n - 1), m, dtype, op, factor);
      for (int k = 1; k < n && n > 2; ++k) copyShared(x(k), x(0), m * es);
    }
  } catch (const Error& e) {
    group_->fail(e);
  }
  // Every rank's part is in every buffer once every rank got here.
  group_->publish();
  group_->waitAll(group_->phase(), what);
  slotFree_ = group_->phase();
  ++directAllreduces_;
  return Start::kDone;
}

Collectives::Pipeline Collectives::pipelineOf(size_t count, size_t es) const {
  // Whole cache lines per part; a buffer smaller than a chunk is split
  // evenly so every rank reduces its share.
  const size_t n = static_cast<size_t>(group_->size());
  const size_t lineElements = kLine / es;
  Pipeline p;
  p.part = std::min(halfBytes_ / n / kLine * kLine / es,
                    ceilDiv(ceilDiv(count, n), lineElements) * lineElements);
  p.chunk = p.part * n;
  p.steps = ceilDiv(count, p.chunk);
  return p;
}

void Collectives::stageChunk(const char* buf, size_t count, size_t es, const Pipeline& p,
                             size_t s) {
  const int me = group_->rank();
  const Parts parts(std::min(p.chunk, count - s * p.chunk), p.part);
  const char* in = buf + s * p.chunk * es;
  for (int k = 0; k < group_->size(); ++k) {
    if (k == me) continue;
    copyBytes(half(me, s % 2) + parts.offset(k) * es, in + parts.offset(k) * es,
              parts.length(k) * es);
  }
}

// Step s (0..steps): copy the parts of chunk s that peers reduce into our
// half s%2, publish, then reduce our part of chunk s from the peers' halves
// and our buffer into our half (for the peers), from kOwnInPlaceBytes on
// into our buffer as well in the same pass, and copy the parts of chunk s-1
// (reduced at the previous step) that are not there yet out. Region k of a
// half holds part k of its chunk: our input for rank k, or (k == us) our
// result. The average's multiply rides on the reduction (factor), so no
// pass over the buffer is added for it.
void Collectives::pipelinedAllreduce(char* buf, size_t count, DataType dtype, ReduceOp op,
                                     double factor, Start start) {
  const char* what = "allreduce";
  const int n = group_->size();
  const int me = group_->rank();
  const size_t es = elementSize(dtype);
  const Pipeline p = pipelineOf(count, es);
  const size_t part = p.part;
  const size_t chunk = p.chunk;
  const size_t steps = p.steps;
  auto chunkLength = [&](size_t s) { return std::min(chunk, count - s * chunk); };
  const bool stream = count * es >= kStreamingBytes;
  const bool ownInPlace = count * es >= kOwnInPlaceBytes;
  if (start == Start::kFresh) begin(what);
  for (size_t s = 0; s <= steps; ++s) {
    const uint32_t h = s % 2;
    // Step 0's chunk staged and published by directAllreduce, every rank's.
    if (s > 0 || start != Start::kFirstChunkStaged) {
      if (s < steps) stageChunk(buf, count, es, p, s);
      group_->publish();
      group_->waitAll(group_->phase(), what);
    }
    if (s < steps) {
      const Parts parts(chunkLength(s), part);
      const size_t at = parts.offset(me) * es;
      char* own = buf + s * chunk * es + at;
      foldInRankOrder(
          half(me, h) + at, n, [&](int k) { return k == me ? own : half(k, h) + at; },
          parts.length(me), dtype, op, factor, ownInPlace ? own : nullptr);
    }
    if (s > 0) {
      const size_t prev = s - 1;
      const Parts parts(chunkLength(prev), part);
      char* out = buf + prev * chunk * es;
      for (int k = 0; k < n; ++k) {
        if (k == me && ownInPlace) continue;  // written by our reduction
        copyBytes(out + parts.offset(k) * es, half(k, prev % 2) + parts.offset(k) * es,
                  parts.length(k) * es, stream);
      }
    }
  }
  end();
}

void Collectives::reducescatter(const void* in, void* out, const std::vector<size_t>& recvCounts,
                                DataType dtype, ReduceOp op) {
  const char* what = "reducescatter";
  checkCounts(recvCounts, what);
  checkReduceOp(op, what);
  const size_t es = elementSize(dtype);
  group_->checkUsable(what);
  const int n = group_->size();
  const int me = group_->rank();
  const auto offsets = offsetsOf(recvCounts);
  const char* input = static_cast<const char*>(in);
  if (n == 1) {
    if (recvCounts[0] > 0) std::memmove(out, in, recvCounts[0] * es);
    return;
  }
  // Region b of a half: our piece of block b for rank b.
  const size_t region = halfBytes_ / n / kLine * kLine;
  const size_t piece = region / es;
  size_t steps = 0;
  for (size_t c : recvCounts) steps = std::max(steps, ceilDiv(c, piece));
  if (steps == 0) return;
  begin(what);
  for (size_t s = 0; s < steps; ++s) {
    const uint32_t h = s % 2;
    auto pieceLength = [&](int b) {
      const size_t from = std::min(recvCounts[b], s * piece);
      return std::min(recvCounts[b], from + piece) - from;
    };
    for (int b = 0; b < n; ++b) {
      if (b == me) continue;
      copyBytes(half(me, h) + b * region, input + (offsets[b] + s * piece) * es,
                pieceLength(b) * es);
    }
    group_->publish();
    group_->waitAll(group_->phase(), what);
    const char* own = input + (offsets[me] + s * piece) * es;
    foldInRankOrder(
        static_cast<char*>(out) + s * piece * es, n,
        [&](int k) { return k == me ? own : half(k, h) + me * region; }, pieceLength(me), dtype,
        op);
  }
  end();
}

void Collectives::allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                             DataType dtype) {
  const char* what = "allgatherv";
  checkCounts(counts, what);
  const size_t es = elementSize(dtype);
  group_->checkUsable(what);
  const int n = group_->size();
  const int me = group_->rank();
  const auto offsets = offsetsOf(counts);
  char* output = static_cast<char*>(out);
  const char* input = static_cast<const char*>(in);
  if (counts[me] > 0) std::memmove(output + offsets[me] * es, in, counts[me] * es);
  if (n == 1) return;
  const size_t piece = halfBytes_ / es;
  size_t steps = 0;
  for (size_t c : counts) steps = std::max(steps, ceilDiv(c, piece));
  if (steps == 0) return;
  const bool stream =
      std::accumulate(counts.begin(), counts.end(), size_t(0)) * es >= kStreamingBytes;
  begin(what);
  auto pieceLength = [&](int r, size_t s) {
    const size_t from = std::min(counts[r], s * piece);
    return std::min(counts[r], from + piece) - from;
  };
  for (size_t s = 0; s < steps; ++s) {
    const uint32_t h = s % 2;
    copyBytes(half(me, h), input + s * piece * es, pieceLength(me, s) * es);
    group_->publish();
    group_->waitAll(group_->phase(), what);
    for (int k = 0; k < n; ++k) {
      if (k == me) continue;
      copyBytes(output + (offsets[k] + s * piece) * es, half(k, h), pieceLength(k, s) * es, stream);
    }
  }
  end();
}

void Collectives::broadcast(void* buf, size_t count, DataType dtype, int root) {
  const char* what = "broadcast";
  const int n = group_->size();
  KOLO_CHECK_ARG(root >= 0 && root < n, "shm broadcast: root " + std::to_string(root) +
                                            " out of range for size " + std::to_string(n));
  const size_t es = elementSize(dtype);
  group_->checkUsable(what);
  if (count == 0 || n == 1) return;
  const int me = group_->rank();
  char* data = static_cast<char*>(buf);
  const size_t piece = halfBytes_ / es;
  const size_t steps = ceilDiv(count, piece);
  begin(what);
  const uint32_t base = group_->phase();
  for (size_t s = 0; s < steps; ++s) {
    const uint32_t h = s % 2;
    const size_t length = std::min(piece, count - s * piece);
    if (me == root) {
      // Half h last held step s-2; its readers finished it before their
      // phase of step s-1.
      if (s >= 2) group_->waitAll(base + static_cast<uint32_t>(s), what);
      copyShared(half(me, h), data + s * piece * es, length * es);
      group_->publish();
    } else {
      group_->publish();
      group_->waitFor(root, group_->phase(), what);
      copyShared(data + s * piece * es, half(root, h), length * es);
    }
  }
  end();
}

void Collectives::alltoallv(const void* in, const std::vector<size_t>& sendCounts, void* out,
                            const std::vector<size_t>& recvCounts, DataType dtype) {
  const char* what = "alltoallv";
  checkCounts(sendCounts, "alltoallv (send counts)");
  checkCounts(recvCounts, "alltoallv (receive counts)");
  const int n = group_->size();
  const int me = group_->rank();
  KOLO_CHECK_ARG(sendCounts[me] == recvCounts[me], "shm alltoallv: rank " + std::to_string(me) +
                                                       " sends " + std::to_string(sendCounts[me]) +
                                                       " elements to itself but expects " +
                                                       std::to_string(recvCounts[me]));
  const size_t es = elementSize(dtype);
  group_->checkUsable(what);
  const auto sendOffsets = offsetsOf(sendCounts);
  const auto recvOffsets = offsetsOf(recvCounts);
  const char* input = static_cast<const char*>(in);
  char* output = static_cast<char*>(out);
  if (sendCounts[me] > 0) {
    std::memmove(output + recvOffsets[me] * es, input + sendOffsets[me] * es, sendCounts[me] * es);
  }
  if (n == 1) return;
  // A half: a line with our step count, then region d for our data to rank d.
  const size_t region = (halfBytes_ - kLine) / n / kLine * kLine;
  const size_t piece = region / es;
  auto regionOf = [&](int r, uint32_t h, int d) { return half(r, h) + kLine + d * region; };
  uint64_t mySteps = 0;
  for (int d = 0; d < n; ++d) {
    if (d != me) mySteps = std::max<uint64_t>(mySteps, ceilDiv(sendCounts[d], piece));
  }
  // No early return on empty counts: only the steps every rank announces at
  // step 0 tell whether anyone has data.
  begin(what);
  uint64_t steps = 1;
  for (uint64_t s = 0; s < steps; ++s) {
    const uint32_t h = s % 2;
    auto length = [&](size_t c) {
      const size_t from = std::min<size_t>(c, s * piece);
      return std::min(c, from + piece) - from;
    };
    if (s == 0) std::memcpy(half(me, 0), &mySteps, sizeof mySteps);
    for (int d = 0; d < n; ++d) {
      if (d == me) continue;
      copyBytes(regionOf(me, h, d), input + (sendOffsets[d] + s * piece) * es,
                length(sendCounts[d]) * es);
    }
    group_->publish();
    group_->waitAll(group_->phase(), what);
    if (s == 0) {
      for (int k = 0; k < n; ++k) {
        uint64_t theirs = 0;
        std::memcpy(&theirs, half(k, 0), sizeof theirs);
        steps = std::max(steps, theirs);
      }
    }
    for (int k = 0; k < n; ++k) {
      if (k == me) continue;
      copyBytes(output + (recvOffsets[k] + s * piece) * es, regionOf(k, h, me),
                length(recvCounts[k]) * es);
    }
  }
  end();
}

}  // namespace kolo::comm::shm
