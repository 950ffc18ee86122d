// Collectives across hosts in two levels: a composition of a data plane
// among the ranks of each host (shared memory) and one among the ranks of
// equal local rank on different hosts (Gloo or MPI), not a backend of its
// own. For a group whose hosts all have the same number L > 1 of ranks.
//
//   allreduce   local reduce-scatter (rank l of each host gets block l of
//               the host's sum), cross-host allreduce of block l among the
//               ranks of local rank l, local allgather. Each host sends its
//               data over the network once in total, not L times, and the
//               L cross-host allreduces run in parallel.
//   allgatherv  local allgather of the host's blocks; cross-host allgather
//               of piece l of every host's blocks among local rank l; local
//               allgather of the pieces; reordered into rank order.
//   broadcast   cross-host broadcast among the root's local rank, then a
//               local broadcast on every host.
//   alltoallv, reducescatter, and any op whose two-level form is switched
//               off: the flat plane over the whole group.
//
// Every rank of the group computes each reduced element once, in the same
// order (local rank order, then host order), so results agree bit for bit.
//
// Failure: a rank talks to its host's ranks and to its peers of equal local
// rank only, so a failure in one plane would reach the others only after
// their timeout. The first error in any plane therefore closes all of them
// (peers blocked on this rank in any plane fail at once, and fail theirs in
// turn) and every later call throws at once.
//
// Threading: as comm::Collectives. setTwoLevelAllreduce may be called
// between operations (same value on every rank at the same point: the
// autotuner's decisions arrive through negotiation).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "comm/shm/host.h"

namespace kolo::comm::hierarchical {

struct Planes {
  std::unique_ptr<comm::Collectives> local;  // this host's ranks, by local rank
  std::unique_ptr<comm::Collectives> cross;  // local rank l of every host, by host
  std::unique_ptr<comm::Collectives> flat;   // the whole group
};

class Collectives final : public comm::Collectives {
 public:
  // layout must be uniform with more than one rank per host; rank is this
  // rank in the group. allreduce/allgather: whether those ops (allgather:
  // also broadcast) take the two-level form.
  Collectives(shm::HostLayout layout, int rank, Planes planes, bool allreduce, bool allgather);

  const char* name() const override { return name_.c_str(); }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                  DataType dtype) override;
  void broadcast(void* buf, size_t count, DataType dtype, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& sendCounts, void* out,
                 const std::vector<size_t>& recvCounts, DataType dtype) override;
  void reducescatter(const void* in, void* out, const std::vector<size_t>& recvCounts,
                     DataType dtype, ReduceOp op) override;

  bool canSwitchTwoLevelAllreduce() const override { return true; }
  bool twoLevelAllreduce() const override { return allreduce_; }
  void setTwoLevelAllreduce(bool on) override { allreduce_ = on; }

  // Abandons every plane; later calls throw as after a failure.
  void abandon(const std::string& why) override;

 private:
  void checkCounts(const std::vector<size_t>& counts, const char* what) const;
  void twoLevelAllgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                          DataType dtype);
  // Runs one operation; see Failure above.
  template <typename Fn>
  void guarded(const char* what, Fn&& fn);

  const shm::HostLayout layout_;
  const int rank_;
  const int host_;       // this rank's host index (its cross rank)
  const int localRank_;  // this rank's index among its host's ranks
  const int localSize_;
  Planes planes_;
  bool allreduce_;
  const bool allgather_;
  std::string name_;
  std::vector<char> scratch_;  // allgatherv staging, grown on demand
  std::string failure_;        // the first error; planes closed
};

// Splits count elements into parts even parts (the first count % parts one
// longer); what the local reduce-scatter gives each local rank.
std::vector<size_t> evenParts(size_t count, int parts);

}  // namespace kolo::comm::hierarchical
