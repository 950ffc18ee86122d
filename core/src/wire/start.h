// The start-up exchange of an engine (engine/engine.cc), over set 0's
// control channel once it is connected: what each rank tells rank 0, and
// the summary rank 0 broadcasts back.
#pragma once

#include <string>
#include <vector>

namespace kolo::wire {

// One rank's part.
struct StartRequest {
  std::string host;  // the rank's address, as peers reach it
  std::string sets;  // its static process sets, as text (compared as text)
};
// Rank 0's answer: the first disagreement (empty: none) and every rank's host.
struct StartSummary {
  std::string mismatch;
  std::vector<std::string> hosts;  // by rank
};

std::vector<char> encode(const StartRequest& request);
// Throws Internal for a malformed message (as decodeStartSummary).
StartRequest decodeStartRequest(const std::vector<char>& bytes);
std::vector<char> encode(const StartSummary& summary);
// size: the job's ranks; the summary must name a host for each.
StartSummary decodeStartSummary(const std::vector<char>& bytes, int size);

}  // namespace kolo::wire
