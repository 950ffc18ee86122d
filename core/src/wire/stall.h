// The stall check round's messages (negotiation/stall_inspector.h): every
// rank's pending operations and their ages, gathered to rank 0, and the
// report rank 0 broadcasts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kolo {

struct PendingAge {
  std::string name;
  int64_t ageMs = 0;  // since enqueue on this rank
  // Requests made through another API's call (Request::call): the call as
  // reports describe it (describeCall); empty otherwise.
  std::string what;
};

struct StallReport {
  std::string warning;    // empty: nothing new to warn about
  bool shutdown = false;  // every rank fails with shutdownMessage
  std::string shutdownMessage;
};

namespace wire {

std::vector<char> encode(const std::vector<PendingAge>& pending);
// Throws Internal for a malformed message (as the two below).
std::vector<PendingAge> decodePending(const std::vector<char>& bytes);
std::vector<char> encode(const StallReport& report);
StallReport decodeReport(const std::vector<char>& bytes);

}  // namespace wire
}  // namespace kolo
