// The control messages of a negotiation cycle besides requests and
// responses (wire/wire.h): the status word at the head of the cycle's AND
// allreduce, and the stop exchange that follows when a rank shuts down or
// aborts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kolo {

// What the stop exchange tells every rank: who aborted (with their
// messages) and who shut down.
struct StopInfo {
  std::vector<int> abortedRanks;
  std::vector<std::string> abortMessages;  // parallel to abortedRanks
  std::vector<int> shutdownRanks;
};

namespace wire {

// The cycle's first word, ANDed over the set's ranks with the cache bits
// that follow it. Each flag is stored inverted, so one AND computes "no
// rank has X" for every flag at once.
namespace status {
constexpr uint64_t kNoUncached = 1u << 0;    // some rank has new requests
constexpr uint64_t kNoInvalid = 1u << 1;     // some rank found a stale cache entry
constexpr uint64_t kNoShutdown = 1u << 2;    // some rank shuts down
constexpr uint64_t kNoAbort = 1u << 3;       // some rank aborts
constexpr uint64_t kNoStallCheck = 1u << 4;  // cleared by rank 0 only
constexpr uint64_t kNoTune = 1u << 5;        // cleared by rank 0 only
constexpr uint64_t kNoBusy = 1u << 6;        // cleared by a rank with work in any set
constexpr uint64_t kAllClear =
    kNoUncached | kNoInvalid | kNoShutdown | kNoAbort | kNoStallCheck | kNoTune | kNoBusy;
}  // namespace status

// One rank's part of the stop exchange (gathered to rank 0).
std::vector<char> encodeStop(bool abort, bool shutdown, const std::string& abortMessage);
// Rank 0: every rank's part (by set rank) as the summary it broadcasts.
// Throws Internal for a malformed part.
std::vector<char> encodeStopSummary(const std::vector<std::vector<char>>& parts);
// Every rank: the broadcast summary of a set of `size` ranks. Throws
// Internal when it is malformed.
StopInfo decodeStopSummary(const std::vector<char>& bytes, int size);

}  // namespace wire
}  // namespace kolo
