#include "comm/hierarchical/collectives.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <numeric>
#include <string>
#include <utility>

#include "kolo/error.h"

namespace kolo::comm::hierarchical {
namespace {

std::vector<size_t> offsetsOf(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  return offsets;
}

size_t sum(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t(0));
}

}  // namespace

std::vector<size_t> evenParts(size_t count, int parts) {
  std::vector<size_t> out(parts, count / parts);
  for (size_t i = 0; i < count % parts; ++i) ++out[i];
  return out;
}

Collectives::Collectives(shm::HostLayout layout, int rank, Planes planes, bool allreduce,
                         bool allgather)
    : layout_(std::move(layout)),
      rank_(rank),
      host_(layout_.hostOf.at(rank)),
      localRank_(layout_.localRank(rank)),
      localSize_(layout_.localSize(rank)),
      planes_(std::move(planes)),
      allreduce_(allreduce),
      allgather_(allgather),
      name_(std::string("hierarchical_") + planes_.cross->name()) {
  KOLO_ENFORCE(layout_.uniform() && localSize_ > 1 && layout_.hostCount() > 1,
               "hierarchical collectives need several hosts with the same number (> 1) of ranks");
}

template <typename Fn>
void Collectives::guarded(const char* what, Fn&& fn) {
  if (!failure_.empty()) {
    throw PeerFailure(std::string("hierarchical ") + what +
                      ": the data plane failed earlier: " + failure_);
  }
  try {
    fn();
  } catch (const InvalidArgument&) {
    throw;  // refused before any communication: still usable
  } catch (const std::exception& e) {
    failure_ = e.what();
    // Destroying a plane closes it: the peers blocked on this rank there
    // fail now instead of after their timeout.
    planes_.cross.reset();
    planes_.flat.reset();
    planes_.local.reset();
    throw;
  }
}

void Collectives::abandon(const std::string& why) {
  if (failure_.empty()) failure_ = why;
  for (auto* plane : {&planes_.local, &planes_.cross, &planes_.flat}) {
    if (*plane) (*plane)->abandon(why);
  }
}

void Collectives::checkCounts(const std::vector<size_t>& counts, const char* what) const {
  KOLO_CHECK_ARG(counts.size() == static_cast<size_t>(layout_.size()),
                 std::string("hierarchical ") + what + ": " + std::to_string(counts.size()) +
                     " counts for size " + std::to_string(layout_.size()));
}

void Collectives::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  guarded("allreduce", [&] {
    if (!allreduce_) return planes_.flat->allreduce(buf, count, dtype, op);
    elementSize(dtype);
    KOLO_CHECK_ARG(op == ReduceOp::kSum || op == ReduceOp::kMin || op == ReduceOp::kMax ||
                       op == ReduceOp::kProduct,
                   std::string("hierarchical allreduce: unsupported reduce op ") + toString(op));
    if (count == 0) return;
    const auto parts = evenParts(count, localSize_);
    char* mine = static_cast<char*>(buf) + offsetsOf(parts)[localRank_] * elementSize(dtype);
    planes_.local->reducescatter(buf, mine, parts, dtype, op);
    planes_.cross->allreduce(mine, parts[localRank_], dtype, op);
    planes_.local->allgatherv(mine, buf, parts, dtype);
  });
}

void Collectives::allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                             DataType dtype) {
  checkCounts(counts, "allgatherv");
  guarded("allgatherv", [&] { twoLevelAllgatherv(in, out, counts, dtype); });
}

// Scratch: [host block | cross result | all pieces | one host's block].
void Collectives::twoLevelAllgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                                     DataType dtype) {
  if (!allgather_) return planes_.flat->allgatherv(in, out, counts, dtype);
  const size_t es = elementSize(dtype);
  const int hosts = layout_.hostCount();
  const size_t total = sum(counts);
  if (total == 0) return;
  std::vector<size_t> hostTotal(hosts, 0);
  for (int r = 0; r < layout_.size(); ++r) hostTotal[layout_.hostOf[r]] += counts[r];
  // Piece l of host h's block: what local rank l carries across hosts.
  std::vector<std::vector<size_t>> pieces(hosts);
  for (int h = 0; h < hosts; ++h) pieces[h] = evenParts(hostTotal[h], localSize_);

  const auto& mine = layout_.hosts[host_];
  std::vector<size_t> localCounts(localSize_);
  for (int l = 0; l < localSize_; ++l) localCounts[l] = counts[mine[l]];
  std::vector<size_t> crossCounts(hosts);
  for (int h = 0; h < hosts; ++h) crossCounts[h] = pieces[h][localRank_];
  std::vector<size_t> gatheredCounts(localSize_, 0);
  for (int l = 0; l < localSize_; ++l) {
    for (int h = 0; h < hosts; ++h) gatheredCounts[l] += pieces[h][l];
  }
  const size_t hostBytes = hostTotal[host_] * es;
  const size_t crossBytes = sum(crossCounts) * es;
  const size_t maxHostBytes = *std::max_element(hostTotal.begin(), hostTotal.end()) * es;
  if (scratch_.size() < hostBytes + crossBytes + total * es + maxHostBytes) {
    scratch_.resize(hostBytes + crossBytes + total * es + maxHostBytes);
  }
  char* hostBlock = scratch_.data();
  char* crossed = hostBlock + hostBytes;
  char* gathered = crossed + crossBytes;
  char* rebuilt = gathered + total * es;

  planes_.local->allgatherv(in, hostBlock, localCounts, dtype);
  const size_t myPieceAt = offsetsOf(pieces[host_])[localRank_] * es;
  planes_.cross->allgatherv(hostBlock + myPieceAt, crossed, crossCounts, dtype);
  planes_.local->allgatherv(crossed, gathered, gatheredCounts, dtype);

  // gathered holds, for each local rank l, piece l of every host in host
  // order; rebuild each host's block, then put its ranks' blocks in place.
  const auto outOffsets = offsetsOf(counts);
  const auto gatheredOffsets = offsetsOf(gatheredCounts);
  char* output = static_cast<char*>(out);
  for (int h = 0; h < hosts; ++h) {
    const auto pieceOffsets = offsetsOf(pieces[h]);
    for (int l = 0; l < localSize_; ++l) {
      size_t at = gatheredOffsets[l];
      for (int g = 0; g < h; ++g) at += pieces[g][l];
      if (pieces[h][l] > 0) {
        std::memcpy(rebuilt + pieceOffsets[l] * es, gathered + at * es, pieces[h][l] * es);
      }
    }
    size_t at = 0;
    for (int r : layout_.hosts[h]) {
      if (counts[r] > 0)
        std::memcpy(output + outOffsets[r] * es, rebuilt + at * es, counts[r] * es);
      at += counts[r];
    }
  }
}

void Collectives::broadcast(void* buf, size_t count, DataType dtype, int root) {
  KOLO_CHECK_ARG(root >= 0 && root < layout_.size(),
                 "hierarchical broadcast: root " + std::to_string(root) +
                     " out of range for size " + std::to_string(layout_.size()));
  guarded("broadcast", [&] {
    if (!allgather_) return planes_.flat->broadcast(buf, count, dtype, root);
    elementSize(dtype);
    if (count == 0) return;
    const int rootLocal = layout_.localRank(root);
    if (localRank_ == rootLocal) planes_.cross->broadcast(buf, count, dtype, layout_.hostOf[root]);
    planes_.local->broadcast(buf, count, dtype, rootLocal);
  });
}

void Collectives::alltoallv(const void* in, const std::vector<size_t>& sendCounts, void* out,
                            const std::vector<size_t>& recvCounts, DataType dtype) {
  guarded("alltoallv", [&] { planes_.flat->alltoallv(in, sendCounts, out, recvCounts, dtype); });
}

void Collectives::reducescatter(const void* in, void* out, const std::vector<size_t>& recvCounts,
                                DataType dtype, ReduceOp op) {
  guarded("reducescatter", [&] { planes_.flat->reducescatter(in, out, recvCounts, dtype, op); });
}

}  // namespace kolo::comm::hierarchical
