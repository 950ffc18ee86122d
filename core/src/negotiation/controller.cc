#include "negotiation/controller.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "negotiation/fusion.h"
#include "wire/control.h"
#include "wire/wire.h"

namespace kolo {
namespace {

using namespace wire::status;  // the status word (wire/control.h)

size_t cacheWords(int capacity) { return (static_cast<size_t>(capacity) + 63) / 64; }

void setBit(std::vector<uint64_t>& words, size_t offset, int bit) {
  words[offset + bit / 64] |= uint64_t{1} << (bit % 64);
}

bool testBit(const std::vector<uint64_t>& words, size_t offset, int bit) {
  return (words[offset + bit / 64] >> (bit % 64)) & 1u;
}

}  // namespace

Controller::Controller(const Config& config, const Identity& identity,
                       std::unique_ptr<comm::ControlChannel> channel, ResponseCache& cache,
                       EngineStats& stats, Tunables& tunables, std::vector<int> ranks,
                       std::string label)
    : config_(config),
      identity_(identity),
      channel_(std::move(channel)),
      cache_(cache),
      stats_(stats),
      tunables_(tunables),
      table_(std::move(ranks), std::move(label)),
      bits_(1 + cacheWords(cache.capacity()), 0) {}

CycleOutput Controller::runCycle(const CycleInput& input) {
  CycleOutput out;
  const size_t off = 1;
  std::fill(bits_.begin(), bits_.end(), 0);
  uint64_t status = kAllClear;
  if (!input.uncached.empty()) status &= ~kNoUncached;
  if (!input.invalidBits.empty()) status &= ~kNoInvalid;
  if (input.shutdown) status &= ~kNoShutdown;
  if (input.abort) status &= ~kNoAbort;
  if (identity_.rank == 0 && input.stallCheckDue) status &= ~kNoStallCheck;
  if (identity_.rank == 0 && input.tune) status &= ~kNoTune;
  if (input.busy) status &= ~kNoBusy;
  bits_[0] = status;
  if (input.joined) {
    for (int b = 0; b < cache_.capacity(); ++b) {
      if (cache_.occupied(b)) setBit(bits_, off, b);
    }
  } else {
    for (int b : input.readyBits) setBit(bits_, off, b);
  }

  channel_->allreduceAnd(bits_);
  ++stats_.cycles;
  status = bits_[0];

  if ((status & kNoShutdown) == 0 || (status & kNoAbort) == 0) {
    out.stop = true;
    out.stopInfo = exchangeStop(input);
    return out;
  }

  if ((status & kNoTune) == 0) out.tuned = applyTune(input, out);
  out.stallCheck = (status & kNoStallCheck) == 0;
  out.anyBusy = (status & kNoBusy) == 0;

  if ((status & kNoInvalid) == 0) {
    std::vector<uint64_t> invalid(cacheWords(cache_.capacity()), 0);
    for (int b : input.invalidBits) setBit(invalid, 0, b);
    channel_->allreduceOr(invalid);
    for (int b = 0; b < cache_.capacity(); ++b) {
      if (testBit(invalid, 0, b)) {
        out.evictedBits.push_back(b);
        bits_[off + b / 64] &= ~(uint64_t{1} << (b % 64));
        cache_.erase(b);
      }
    }
  }

  // The bits every rank has ready, in increasing order. Word by word: a
  // steady-state cycle has a few bits set among the cache's thousands, and
  // testing each bit cost about 3 us per cycle (a third of a small
  // allreduce's whole time on one host).
  std::vector<const Response*> cached;
  const size_t words = cacheWords(cache_.capacity());
  for (size_t w = 0; w < words; ++w) {
    for (uint64_t word = bits_[off + w]; word != 0; word &= word - 1) {
      const int b = static_cast<int>(w * 64) + __builtin_ctzll(word);
      if (cache_.occupied(b)) cached.push_back(&cache_.at(b));
    }
  }
  stats_.cachedResponses += cached.size();
  out.cached = fuseResponses(cached, tunables_.fusionThresholdBytes);

  if ((status & kNoUncached) == 0) out.uncached = coordinate(input.uncached);
  return out;
}

std::vector<Response> Controller::coordinate(const std::vector<RequestMsg>& mine) {
  ++stats_.coordinatorRounds;
  RequestList list;
  list.rank = identity_.rank;
  list.requests = mine;
  auto gathered = channel_->gatherv(wire::encode(list), 0);
  std::vector<char> encoded;
  if (identity_.rank == 0) {
    for (int r = 0; r < identity_.size; ++r) {
      RequestList theirs = wire::decodeRequestList(gathered[r], identity_.size);
      KOLO_ENFORCE(theirs.rank == r, "request list from rank " + std::to_string(r) +
                                         " claims rank " + std::to_string(theirs.rank));
      for (const auto& m : theirs.requests) table_.add(r, m);
    }
    ResponseList responses;
    responses.responses = fuseResponses(table_.popReady(), tunables_.fusionThresholdBytes);
    encoded = wire::encode(responses);
  }
  channel_->broadcast(encoded, 0);
  return wire::decodeResponseList(encoded, identity_.size).responses;
}

autotune::Decision Controller::applyTune(const CycleInput& input, CycleOutput& out) {
  std::vector<char> bytes;
  if (identity_.rank == 0) bytes = wire::encode(*input.tune);
  channel_->broadcast(bytes, 0);
  autotune::Decision d = wire::decodeDecision(bytes);
  if (tunables_.cacheEnabled && !d.tunables.cacheEnabled) {
    // Emptied, so that no entry from before can hit once it is back on
    // while a peer's request for the same name waits at the coordinator.
    const size_t off = 1;
    for (int b = 0; b < cache_.capacity(); ++b) {
      if (!cache_.occupied(b)) continue;
      out.evictedBits.push_back(b);
      bits_[off + b / 64] &= ~(uint64_t{1} << (b % 64));
      cache_.erase(b);
    }
  }
  tunables_ = d.tunables;
  return d;
}

StopInfo Controller::exchangeStop(const CycleInput& input) {
  auto gathered =
      channel_->gatherv(wire::encodeStop(input.abort, input.shutdown, input.abortMessage), 0);
  std::vector<char> summary;
  if (identity_.rank == 0) summary = wire::encodeStopSummary(gathered);
  channel_->broadcast(summary, 0);
  return wire::decodeStopSummary(summary, identity_.size);
}

std::vector<MessageTable::Waiting> Controller::waiting() const { return table_.waiting(); }

}  // namespace kolo
