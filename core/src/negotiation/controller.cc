#include "negotiation/controller.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "execution/fusion.h"
#include "wire/wire.h"

namespace kolo {
namespace {

// Status word: each flag is stored inverted so one AND allreduce computes
// "no rank has X" for every flag along with the cache bits.
constexpr uint64_t kNoUncached = 1u << 0;
constexpr uint64_t kNoInvalid = 1u << 1;
constexpr uint64_t kNoShutdown = 1u << 2;
constexpr uint64_t kNoAbort = 1u << 3;
constexpr uint64_t kNoStallCheck = 1u << 4;  // cleared by rank 0 only
constexpr uint64_t kNoTune = 1u << 5;        // cleared by rank 0 only
constexpr uint64_t kNoBusy = 1u << 6;        // cleared by a rank with work in any set
constexpr uint64_t kAllClear =
    kNoUncached | kNoInvalid | kNoShutdown | kNoAbort | kNoStallCheck | kNoTune | kNoBusy;

size_t cacheWords(int capacity) { return (static_cast<size_t>(capacity) + 63) / 64; }

void setBit(std::vector<uint64_t>& words, size_t offset, int bit) {
  words[offset + bit / 64] |= uint64_t{1} << (bit % 64);
}

bool testBit(const std::vector<uint64_t>& words, size_t offset, int bit) {
  return (words[offset + bit / 64] >> (bit % 64)) & 1u;
}

// Stop exchange payload: "<flags>\n<message>".
std::vector<char> encodeStop(const CycleInput& in) {
  std::string s = std::string(in.abort ? "A" : "-") + (in.shutdown ? "S" : "-") + "\n" +
                  in.abortMessage;
  return std::vector<char>(s.begin(), s.end());
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
  if (identity_.rank == 0) bytes = autotune::encode(*input.tune);
  channel_->broadcast(bytes, 0);
  autotune::Decision d = autotune::decodeDecision(bytes);
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
  auto gathered = channel_->gatherv(encodeStop(input), 0);
  std::vector<char> summary;
  if (identity_.rank == 0) {
    // "<rank> <flags>\n<message length>\n<message>" per rank.
    std::string s;
    for (int r = 0; r < identity_.size; ++r) {
      std::string text(gathered[r].begin(), gathered[r].end());
      auto nl = text.find('\n');
      std::string flags = text.substr(0, nl);
      std::string message = nl == std::string::npos ? "" : text.substr(nl + 1);
      s += std::to_string(r) + " " + flags + "\n" + std::to_string(message.size()) + "\n" +
           message;
    }
    summary.assign(s.begin(), s.end());
  }
  channel_->broadcast(summary, 0);
  StopInfo info;
  std::string s(summary.begin(), summary.end());
  size_t pos = 0;
  for (int r = 0; r < identity_.size && pos < s.size(); ++r) {
    size_t nl1 = s.find('\n', pos);
    std::string head = s.substr(pos, nl1 - pos);
    size_t nl2 = s.find('\n', nl1 + 1);
    size_t len = std::stoul(s.substr(nl1 + 1, nl2 - nl1 - 1));
    std::string message = s.substr(nl2 + 1, len);
    pos = nl2 + 1 + len;
    std::string flags = head.substr(head.find(' ') + 1);
    if (flags.size() >= 2 && flags[0] == 'A') {
      info.abortedRanks.push_back(r);
      info.abortMessages.push_back(message);
    }
    if (flags.size() >= 2 && flags[1] == 'S') info.shutdownRanks.push_back(r);
  }
  return info;
}

std::vector<MessageTable::Waiting> Controller::waiting() const { return table_.waiting(); }

}  // namespace kolo
