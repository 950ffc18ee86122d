#include "comm/gloo/control_channel.h"

#include <utility>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/types.h>

#include "kolo/error.h"

namespace kolo::comm::gloo {
namespace {

// Slot prefix for the point-to-point part of gatherv; gloo's own algorithms
// use prefixes 0x01..0x08.
constexpr uint8_t kGathervSlotPrefix = 0x41;

}  // namespace

ControlChannel::ControlChannel(std::unique_ptr<Context> context) : context_(std::move(context)) {}

void ControlChannel::allreduceAnd(std::vector<uint64_t>& bits) { allreduceBits(bits, true); }

void ControlChannel::allreduceOr(std::vector<uint64_t>& bits) { allreduceBits(bits, false); }

void ControlChannel::allreduceBits(std::vector<uint64_t>& bits, bool isAnd) {
  if (size() == 1 || bits.empty()) return;
  const char* what = isAnd ? "allreduce(and)" : "allreduce(or)";
  context_->run(what, [&](uint32_t tag) {
    ::gloo::AllreduceOptions opts(context_->glooContext());
    opts.setOutput(bits.data(), bits.size());
    opts.setReduceFunction([isAnd](void* out, const void* a, const void* b, size_t n) {
      auto* o = static_cast<uint64_t*>(out);
      const auto* x = static_cast<const uint64_t*>(a);
      const auto* y = static_cast<const uint64_t*>(b);
      for (size_t i = 0; i < n; ++i) o[i] = isAnd ? (x[i] & y[i]) : (x[i] | y[i]);
    });
    opts.setTag(tag);
    opts.setTimeout(context_->timeout());
    ::gloo::allreduce(opts);
  });
}

std::vector<std::vector<char>> ControlChannel::gatherv(const std::vector<char>& mine, int root) {
  checkRoot(root, "gatherv");
  const int me = rank();
  const int n = size();
  std::vector<std::vector<char>> result;
  if (me == root) result.resize(n);
  if (n == 1) {
    result[0] = mine;
    return result;
  }
  context_->run("gatherv", [&](uint32_t tag) {
    const auto& ctx = context_->glooContext();
    const auto timeout = context_->timeout();
    // Step 1: the root learns every length.
    uint64_t myLength = mine.size();
    std::vector<uint64_t> lengths(me == root ? n : 0);
    ::gloo::GatherOptions gather(ctx);
    gather.setInput(&myLength, 1);
    if (me == root) gather.setOutput(lengths.data(), lengths.size());
    gather.setRoot(root);
    gather.setTag(tag);
    gather.setTimeout(timeout);
    ::gloo::gather(gather);

    // Step 2: non-empty payloads go straight to the root.
    const auto slot = ::gloo::Slot::build(kGathervSlotPrefix, tag);
    if (me != root) {
      if (mine.empty()) return;
      auto buf = ctx->createUnboundBuffer(const_cast<char*>(mine.data()), mine.size());
      buf->send(root, slot);
      waitSend(*buf, timeout);
      return;
    }
    std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> bufs;
    for (int r = 0; r < n; ++r) {
      if (r == root) continue;
      result[r].resize(lengths[r]);
      if (lengths[r] == 0) continue;
      bufs.push_back(ctx->createUnboundBuffer(result[r].data(), lengths[r]));
      bufs.back()->recv(r, slot);
    }
    for (auto& buf : bufs) waitRecv(*buf, timeout);
    result[root] = mine;
  });
  return result;
}

void ControlChannel::broadcast(std::vector<char>& bytes, int root) {
  checkRoot(root, "broadcast");
  if (size() == 1) return;
  context_->run("broadcast", [&](uint32_t tag) {
    const auto& ctx = context_->glooContext();
    uint64_t length = bytes.size();
    ::gloo::BroadcastOptions lengthOpts(ctx);
    lengthOpts.setOutput(&length, 1);
    lengthOpts.setRoot(root);
    lengthOpts.setTag(tag);
    lengthOpts.setTimeout(context_->timeout());
    ::gloo::broadcast(lengthOpts);
    if (rank() != root) bytes.resize(length);
    if (length == 0) return;
    // Same tag: the payload follows the length on every pair, in order.
    ::gloo::BroadcastOptions payloadOpts(ctx);
    payloadOpts.setOutput(bytes.data(), bytes.size());
    payloadOpts.setRoot(root);
    payloadOpts.setTag(tag);
    payloadOpts.setTimeout(context_->timeout());
    ::gloo::broadcast(payloadOpts);
  });
}

void ControlChannel::barrier() {
  if (size() == 1) return;
  context_->run("barrier", [&](uint32_t tag) {
    ::gloo::BarrierOptions opts(context_->glooContext());
    opts.setTag(tag);
    opts.setTimeout(context_->timeout());
    ::gloo::barrier(opts);
  });
}

void ControlChannel::checkRoot(int root, const char* what) const {
  KOLO_CHECK_ARG(root >= 0 && root < size(), std::string("gloo ") + what + ": root " +
                                                 std::to_string(root) + " out of range for size " +
                                                 std::to_string(size()));
}

}  // namespace kolo::comm::gloo
