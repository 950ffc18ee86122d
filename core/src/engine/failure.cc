#include "engine/failure.h"

#include "common/ranks_text.h"

namespace kolo {

Status stopStatus(const StopInfo& info, int myRank) {
  if (!info.abortedRanks.empty()) {
    std::string msg;
    for (size_t i = 0; i < info.abortedRanks.size(); ++i) {
      if (i) msg += "; ";
      msg += "rank " + std::to_string(info.abortedRanks[i]) + " failed: " + info.abortMessages[i];
    }
    return Status{ErrorCode::kPeerFailure, msg};
  }
  for (int r : info.shutdownRanks) {
    if (r == myRank) return Status{ErrorCode::kShutdown, "kolo was shut down on this rank"};
  }
  return Status{ErrorCode::kShutdown,
                ranksPhrase(info.shutdownRanks) +
                    " shut down (called shutdown) while this operation was pending"};
}

}  // namespace kolo
