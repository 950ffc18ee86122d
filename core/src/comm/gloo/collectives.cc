#include "comm/gloo/collectives.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/types.h>

#include "kolo/error.h"
#include "comm/tcp/topology.h"
#include "kernels/reduce.h"

namespace kolo::comm::gloo {
namespace {

// Slot prefix for the ring reduce-scatter; gloo's own algorithms use
// prefixes 0x01..0x08.
constexpr uint8_t kReduceScatterSlotPrefix = 0x42;
constexpr uint8_t kBroadcastSlotPrefix = 0x43;

// Calls fn with a null pointer of the type that stores one element of dtype,
// so gloo sees the element size through its typed setters.
template <typename Fn>
void withStorageType(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kFloat32:
      return fn(static_cast<float*>(nullptr));
    case DataType::kFloat64:
      return fn(static_cast<double*>(nullptr));
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return fn(static_cast<uint16_t*>(nullptr));
    case DataType::kInt32:
      return fn(static_cast<int32_t*>(nullptr));
    case DataType::kInt64:
      return fn(static_cast<int64_t*>(nullptr));
    case DataType::kInt16:
      return fn(static_cast<int16_t*>(nullptr));
    case DataType::kInt8:
      return fn(static_cast<int8_t*>(nullptr));
    case DataType::kUInt8:
    case DataType::kBool:
      return fn(static_cast<uint8_t*>(nullptr));
  }
  throw InvalidArgument("gloo: unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

void checkReduceOp(ReduceOp op, const char* what) {
  KOLO_CHECK_ARG(op == ReduceOp::kSum || op == ReduceOp::kMin || op == ReduceOp::kMax ||
                     op == ReduceOp::kProduct,
                 std::string("gloo ") + what + ": unsupported reduce op " + toString(op));
}

// Messages a rank sends in recursive doubling over n ranks (at most).
size_t meshRounds(int n) {
  int rounds = 0;
  for (int d = 1; d < tcp::powerOfTwoBelow(n); d *= 2) ++rounds;
  return static_cast<size_t>(rounds + (tcp::powerOfTwoBelow(n) == n ? 0 : 1));
}

size_t total(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t(0));
}

// gloo wants a non-null pointer even for an empty buffer.
void* orDummy(const void* ptr) {
  static char dummy;
  return ptr != nullptr ? const_cast<void*>(ptr) : &dummy;
}

}  // namespace

Collectives::Collectives(std::unique_ptr<Context> context, std::unique_ptr<tcp::Mesh> mesh)
    : context_(std::move(context)), mesh_(std::move(mesh)) {}

void Collectives::abandon(const std::string& why) {
  context_->abandon(why);
  if (mesh_) mesh_->abandon(why);
}

void Collectives::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  checkReduceOp(op, "allreduce");
  const size_t es = elementSize(dtype);  // rejects an unknown dtype before the network
  if (count == 0 || context_->size() == 1) return;
  if (mesh_ != nullptr && count * es * meshRounds(context_->size()) <= kMeshAllreduceBytes) {
    meshAllreduce(buf, count, dtype, op);
    return;
  }
  context_->run("allreduce", [&](uint32_t tag) {
    withStorageType(dtype, [&](auto* typed) {
      using T = std::remove_pointer_t<decltype(typed)>;
      ::gloo::AllreduceOptions opts(context_->glooContext());
      opts.setOutput(static_cast<T*>(buf), count);
      opts.setReduceFunction([dtype, op](void* out, const void* a, const void* b, size_t n) {
        reduceElements(out, a, b, n, dtype, op);
      });
      opts.setTag(tag);
      opts.setTimeout(context_->timeout());
      ::gloo::allreduce(opts);
    });
  });
}

void Collectives::meshAllreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  const size_t bytes = count * elementSize(dtype);
  if (meshScratch_.size() < bytes) meshScratch_.resize(bytes);
  char* mine = static_cast<char*>(buf);
  char* theirs = meshScratch_.data();
  const int me = context_->rank();
  mesh_->nextOperation();
  auto exchange = [&](int to, int from, bool combine) {
    std::vector<tcp::Mesh::Send> sends;
    if (to >= 0) sends.push_back({to, mine, bytes});
    std::vector<tcp::Mesh::Recv> recvs;
    if (from >= 0) {
      tcp::Mesh::Recv in;
      in.from = from;
      in.fixed = combine ? theirs : mine;
      in.expected = static_cast<int64_t>(bytes);
      recvs.push_back(in);
    }
    mesh_->transfer("allreduce", std::move(sends), std::move(recvs));
    if (!combine || from < 0) return;
    // The lower rank's value first on both sides, so every rank ends with
    // the same bits.
    if (from < me) {
      reduceElements(mine, theirs, mine, count, dtype, op);
    } else {
      reduceElements(mine, mine, theirs, count, dtype, op);
    }
  };
  tcp::recursiveDoubling(me, context_->size(), exchange);
}

void Collectives::allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                             DataType dtype) {
  checkCounts(counts, "allgatherv");
  const size_t es = elementSize(dtype);
  const int me = context_->rank();
  const size_t offset = std::accumulate(counts.begin(), counts.begin() + me, size_t(0));
  // Our own block is copied locally; gloo only moves the others.
  if (counts[me] > 0) {
    std::memmove(static_cast<char*>(out) + offset * es, in, counts[me] * es);
  }
  if (total(counts) == 0 || context_->size() == 1) return;
  context_->run("allgatherv", [&](uint32_t tag) {
    withStorageType(dtype, [&](auto* typed) {
      using T = std::remove_pointer_t<decltype(typed)>;
      ::gloo::AllgathervOptions opts(context_->glooContext());
      opts.setOutput(static_cast<T*>(out), counts);
      opts.setTag(tag);
      opts.setTimeout(context_->timeout());
      ::gloo::allgatherv(opts);
    });
  });
}

void Collectives::broadcast(void* buf, size_t count, DataType dtype, int root) {
  KOLO_CHECK_ARG(root >= 0 && root < context_->size(),
                 "gloo broadcast: root " + std::to_string(root) + " out of range for size " +
                     std::to_string(context_->size()));
  elementSize(dtype);
  if (count == 0 || context_->size() == 1) return;
  context_->run("broadcast", [&](uint32_t tag) {
    treeBroadcast(static_cast<char*>(buf), count * elementSize(dtype), root, tag);
  });
}

void Collectives::alltoallv(const void* in, const std::vector<size_t>& sendCounts, void* out,
                            const std::vector<size_t>& recvCounts, DataType dtype) {
  checkCounts(sendCounts, "alltoallv (send counts)");
  checkCounts(recvCounts, "alltoallv (receive counts)");
  const int me = context_->rank();
  KOLO_CHECK_ARG(sendCounts[me] == recvCounts[me], "gloo alltoallv: rank " + std::to_string(me) +
                                                       " sends " + std::to_string(sendCounts[me]) +
                                                       " elements to itself "
                                                       "but expects " +
                                                       std::to_string(recvCounts[me]));
  const size_t es = elementSize(dtype);
  if (context_->size() == 1) {
    if (sendCounts[0] > 0) std::memmove(out, in, sendCounts[0] * es);
    return;
  }
  // No early return on empty totals: whether a rank has data differs between
  // ranks, and every rank must take part in the same calls.
  context_->run("alltoallv", [&](uint32_t tag) {
    std::vector<int> everyone(context_->size());
    std::iota(everyone.begin(), everyone.end(), 0);
    context_->connectPeers(everyone);
    withStorageType(dtype, [&](auto* typed) {
      using T = std::remove_pointer_t<decltype(typed)>;
      std::vector<int64_t> sends(sendCounts.begin(), sendCounts.end());
      std::vector<int64_t> recvs(recvCounts.begin(), recvCounts.end());
      ::gloo::AlltoallvOptions opts(context_->glooContext());
      opts.setInput(static_cast<T*>(orDummy(in)), std::move(sends));
      opts.setOutput(static_cast<T*>(orDummy(out)), std::move(recvs));
      opts.setTag(tag);
      opts.setTimeout(context_->timeout());
      ::gloo::alltoallv(opts);
    });
  });
}

void Collectives::reducescatter(const void* in, void* out, const std::vector<size_t>& recvCounts,
                                DataType dtype, ReduceOp op) {
  checkCounts(recvCounts, "reducescatter");
  checkReduceOp(op, "reducescatter");
  const size_t es = elementSize(dtype);
  if (context_->size() == 1) {
    if (recvCounts[0] > 0) std::memmove(out, in, recvCounts[0] * es);
    return;
  }
  if (total(recvCounts) == 0) return;
  context_->run("reducescatter", [&](uint32_t tag) {
    ringReduceScatter(static_cast<const char*>(in), static_cast<char*>(out), recvCounts, dtype, op,
                      tag);
  });
}

// Ring reduce-scatter over n ranks in n-1 steps. At step s rank r sends
// block (r-1-s) to rank r+1 and receives block (r-2-s) from rank r-1, which
// it reduces with its own input. A block travels the whole ring and arrives
// fully reduced at its owner at step n-2. What is sent at step s > 0 is the
// partial sum built at step s-1 (kept in scratch). Empty blocks are skipped
// on both sides, as every rank knows every count.
void Collectives::ringReduceScatter(const char* in, char* out, const std::vector<size_t>& counts,
                                    DataType dtype, ReduceOp op, uint32_t tag) {
  const auto& ctx = context_->glooContext();
  const auto timeout = context_->timeout();
  const int n = context_->size();
  const int me = context_->rank();
  const int next = (me + 1) % n;
  const int prev = (me + n - 1) % n;
  const size_t es = elementSize(dtype);
  std::vector<size_t> offsets(n, 0);
  for (int r = 1; r < n; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  const size_t maxBytes = *std::max_element(counts.begin(), counts.end()) * es;
  if (scratch_.size() < 2 * maxBytes) scratch_.resize(2 * maxBytes);
  char* acc = scratch_.data();
  char* tmp = scratch_.data() + maxBytes;

  auto inBuf =
      ctx->createUnboundBuffer(const_cast<char*>(in), (offsets[n - 1] + counts[n - 1]) * es);
  auto accBuf = ctx->createUnboundBuffer(acc, maxBytes);
  auto tmpBuf = ctx->createUnboundBuffer(tmp, maxBytes);
  const auto slot = ::gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  auto block = [n](int b) { return ((b % n) + n) % n; };

  for (int s = 0; s + 1 < n; ++s) {
    const int sendBlock = block(me - 1 - s);
    const int recvBlock = block(me - 2 - s);
    const size_t sendBytes = counts[sendBlock] * es;
    const size_t recvBytes = counts[recvBlock] * es;
    ::gloo::transport::UnboundBuffer* sender = nullptr;
    if (sendBytes > 0) {
      sender = s == 0 ? inBuf.get() : accBuf.get();
      sender->send(next, slot, s == 0 ? offsets[sendBlock] * es : 0, sendBytes);
    }
    if (recvBytes > 0) tmpBuf->recv(prev, slot, 0, recvBytes);
    if (sender != nullptr) waitSend(*sender, timeout);
    if (recvBytes == 0) continue;
    waitRecv(*tmpBuf, timeout);
    // acc is free again: its send (if any) completed above.
    char* dst = s + 2 == n ? out : acc;
    reduceElements(dst, in + offsets[recvBlock] * es, tmp, counts[recvBlock], dtype, op);
  }
}

// A binomial tree over rank - root (comm/tcp/topology.h): receive from the
// parent, then send to every child; O(log n) peers per rank.
void Collectives::treeBroadcast(char* buf, size_t bytes, int root, uint32_t tag) {
  const tcp::BinomialTree tree(context_->rank(), context_->size(), root);
  std::vector<int> peers = tree.children;
  if (tree.parent >= 0) peers.push_back(tree.parent);
  context_->connectPeers(peers);
  const auto timeout = context_->timeout();
  auto data = context_->glooContext()->createUnboundBuffer(buf, bytes);
  const auto slot = ::gloo::Slot::build(kBroadcastSlotPrefix, tag);
  if (tree.parent >= 0) {
    data->recv(tree.parent, slot);
    waitRecv(*data, timeout);
  }
  for (int child : tree.children) data->send(child, slot);
  for (size_t i = 0; i < tree.children.size(); ++i) waitSend(*data, timeout);
}

void Collectives::checkCounts(const std::vector<size_t>& counts, const char* what) const {
  KOLO_CHECK_ARG(counts.size() == static_cast<size_t>(context_->size()),
                 std::string("gloo ") + what + ": " + std::to_string(counts.size()) +
                     " counts for size " + std::to_string(context_->size()));
}

}  // namespace kolo::comm::gloo
