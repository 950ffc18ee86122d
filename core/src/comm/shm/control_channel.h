// The control channel among the ranks of one host, over shared memory: what
// the controller needs each negotiation cycle (a bitwise allreduce of the
// cache bits, gatherv and broadcast of requests and responses, barrier) in
// one synchronisation each instead of a network round trip.
//
// Same slot discipline as collectives.h: two halves per rank used by
// alternate steps, one publish per step, a final publish that frees the
// slot. Messages longer than a half go through in steps; the first step
// carries each rank's length, so every rank knows how many steps follow.
//
// Threading: as comm::ControlChannel (engine loop only, same order on every
// rank).
#pragma once

#include <memory>
#include <vector>

#include "comm/control_channel.h"
#include "comm/shm/group.h"

namespace kolo::comm::shm {

// Bytes of one rank's slot (two halves).
constexpr size_t kControlSlotBytes = size_t(256) << 10;
// Longest message a rank may announce (a garbled length must not allocate).
constexpr uint64_t kMaxControlMessageBytes = uint64_t(1) << 31;

class ControlChannel final : public comm::ControlChannel {
 public:
  explicit ControlChannel(std::unique_ptr<Group> group);

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }

  void allreduceAnd(std::vector<uint64_t>& bits) override { allreduceBits(bits, true); }
  void allreduceOr(std::vector<uint64_t>& bits) override { allreduceBits(bits, false); }
  std::vector<std::vector<char>> gatherv(const std::vector<char>& mine, int root) override;
  void broadcast(std::vector<char>& bytes, int root) override;
  void barrier() override;
  void abandon(const std::string& why) override { group_->abandon(why); }

 private:
  char* half(int r, uint32_t h) const { return group_->slot(r) + h * halfBytes_; }
  void begin(const char* what);
  void end();
  void allreduceBits(std::vector<uint64_t>& bits, bool isAnd);
  void checkRoot(int root, const char* what) const;
  uint64_t announcedLength(int r, const char* what);

  std::unique_ptr<Group> group_;
  const size_t halfBytes_;
  const size_t piece_;  // payload bytes per half after the length line
  uint32_t slotFree_ = 0;
};

}  // namespace kolo::comm::shm
