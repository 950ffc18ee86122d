// The coordinator's (rank 0's) record of which ranks submitted which
// uncached requests, and the validation that turns cross-rank mismatches
// into per-tensor error responses. One per process set; ranks here are
// ranks within the set, and messages name them by their rank in the job.
// Loop thread of the set's rank 0 only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "wire/message.h"

namespace kolo {

class MessageTable {
 public:
  // ranks: the job rank of each set rank; label: prefixed to error
  // messages ("process set 2 (ranks 0,2)"), empty for the global set.
  MessageTable(std::vector<int> ranks, std::string label);

  void add(int rank, const RequestMsg& msg);

  // Responses for every tensor now submitted by all ranks that have not
  // joined (groups only when complete), in first-arrival order, preceded by
  // join acknowledgements and followed by the join completion when the last
  // rank joined. Ready rows are removed.
  std::vector<Response> popReady();

  // Names submitted by some ranks but not all, with the missing (job) ranks and
  // how long the oldest has waited (for the stall inspector).
  struct Waiting {
    std::string name;
    std::vector<int> missingRanks;
    std::chrono::steady_clock::duration age;
  };
  std::vector<Waiting> waiting() const;

 private:
  struct Row {
    std::vector<std::optional<RequestMsg>> perRank;
    uint64_t arrival = 0;
    std::chrono::steady_clock::time_point firstSeen;
  };

  bool readyRow(const Row& row) const;
  // The members of the local process set that row changes; nullptr when
  // it is not such a change.
  const std::vector<int32_t>* localMembers(const Row& row) const;
  // Whether a row with these localMembers waits for a request of (set) rank.
  bool expected(const std::vector<int32_t>* members, int rank) const;
  // alltoall: "" when every rank that gave receive splits gets the rows it
  // expects from each rank (sent: rows from rank i to rank j at i * size + j),
  // else the error naming the first receiver and sender that disagree.
  std::string checkReceived(const std::string& name, const Row& row,
                            const std::vector<int64_t>& sent) const;
  Response buildResponse(const std::string& name, const Row& row) const;
  Response error(const std::string& name, const std::string& message) const;

  int size_;
  std::vector<int> ranks_;  // job rank of each set rank
  std::string label_;
  uint64_t arrivals_ = 0;
  std::map<std::string, Row> rows_;
  std::vector<bool> joined_;
  std::vector<int> joinOrder_;  // ranks that joined since the last join completed
};

}  // namespace kolo
