// Group: the ranks of one host sharing a Segment, each with a slot of
// slotBytes that only it writes, and phase counters to order the reads.
//
// Synchronisation. Every rank counts the phases it completed in a 32-bit
// word of its own (a futex word in the segment). All ranks run the same
// sequence of operations and so the same sequence of phases: "rank k
// completed phase p" is what every protocol step waits for. publish()
// completes this rank's next phase (an atomic store, plus a FUTEX_WAKE only
// when a peer sleeps on the word); waitFor(k, p) spins briefly, then yields,
// then sleeps on k's word with FUTEX_WAIT in slices, so a waiting rank costs
// no CPU. No wait is unbounded: after Config::timeout without progress it
// throws Timeout naming the rank (and whether its process is stopped); a
// peer whose process exited (pidfd) or whose Group was destroyed or failed
// is PeerFailure naming it, within one slice (kSliceMs). After any failure
// the group is poisoned: it marks itself failed in the segment, wakes its
// waiters (so peers fail promptly too) and every later call throws at once.
//
// Slot reuse. A rank may overwrite its slot once every reader of its old
// contents has completed the phase that ends its reading; operations track
// that as `slotFree` (see collectives.cc and control_channel.cc).
//
// Setup (connect). Rank 0 creates the segment and puts its name in the
// store; the others open it (checking the name's form, the size and the
// header), then every rank reports "ok" or its error under its own key and
// reads everyone's report, so all ranks fail together with the first error
// instead of some waiting for a timeout. The last rank to attach removes
// the name from /dev/shm; on any failure rank 0 removes it.
//
// Direct access (data groups, shareArena). Each rank also says where its
// process's Arena (arena.h) is, and maps every peer's after setup; a rank
// that has its own arena and mapped every peer's is direct-capable. Per
// operation a rank may say where its buffer lies in its arena
// (setDirectOffset, read by peers after the next phase), so the plane can
// reduce every rank's buffer in place (collectives.cc).
//
// Threading: one thread drives a Group (the engine's loop); the destructor
// must not race with a call on it. Ranks may be threads of one process
// (tests) or processes.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/backend_args.h"
#include "comm/shm/arena.h"
#include "comm/shm/segment.h"
#include "kolo/error.h"

namespace kolo::comm::shm {

// Futex slice: how often a sleeping waiter checks its peers' liveness.
constexpr int kSliceMs = 50;

class Group {
 public:
  struct Shared;  // the segment's header (group.cc)

  // Attaches args.identity.rank to the group of args.identity.size ranks
  // through args.store (keys under "shm/"), every rank with the same
  // slotBytes. `role` names the group in messages ("data", "control").
  // Blocks until every rank attached; throws Timeout when a rank does not
  // show up within args.config.timeout, and the first rank's error on every
  // rank when any rank cannot attach. rankNames[r], when given, is how
  // messages name rank r (its rank in the larger group this one is part
  // of); by default its rank here.
  // shareArena: this process's Arena is made (Arena::forThisProcess) and
  // shared with the group (direct access, above).
  static std::unique_ptr<Group> connect(const BackendArgs& args, size_t slotBytes, const char* role,
                                        std::vector<int> rankNames = {}, bool shareArena = false);

  // Marks this rank as gone and wakes its waiters: peers blocked on it fail
  // with PeerFailure at once.
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slotBytes() const { return slotBytes_; }
  char* slot(int r) const { return slots_ + static_cast<size_t>(r) * slotBytes_; }

  // The phases this rank completed (the same count on every rank at the same
  // point of the operation sequence).
  uint32_t phase() const { return phase_; }

  // "rank N" for rank r, as messages name it.
  std::string rankName(int r) const { return nameOf(r); }

  // Throws the earlier failure again when poisoned. Call first in every
  // operation named `what`.
  void checkUsable(const char* what) const;

  // Completes this rank's next phase: everything written before is visible
  // to a peer whose waitFor returns for it.
  void publish();

  // Returns once rank `peer` completed phase `p`; what names the operation
  // in errors. Throws (and poisons) as described above.
  void waitFor(int peer, uint32_t p, const char* what);
  // waitFor every other rank.
  void waitAll(uint32_t p, const char* what);

  // Direct access (above). This process's arena, null when not shared.
  Arena* arena() const { return arena_.get(); }
  // Whether rank r has its arena and mapped every peer's (fixed at setup).
  bool directCapable(int r) const;
  // Rank r's arena as mapped here (this rank's own included); base null
  // when not mapped.
  const Arena::Mapping& arenaOf(int r) const { return peerArenas_[r]; }
  // Where this rank's buffer of the coming operation lies in its arena
  // (-1: not there); peers read it once the next phase is published.
  void setDirectOffset(int64_t offset);
  int64_t directOffsetOf(int r) const;

  // Poisons the group with an error raised by its user (e.g. a reduce that
  // threw midway) so peers do not wait for phases that will never come.
  [[noreturn]] void fail(const Error& error);
  // fail(), without throwing, for a failure elsewhere on this rank
  // (comm::Collectives::abandon): later calls throw PeerFailure with why.
  void abandon(const std::string& why) noexcept;

 private:
  Group(Segment segment, int rank, int size, size_t slotBytes, std::chrono::milliseconds timeout,
        std::string role, std::vector<int> rankNames, std::shared_ptr<Arena> arena);

  void watchPeers();
  void mapArenas();
  void waitForPhase(int peer, uint32_t p, const char* what);
  bool reached(int peer, uint32_t p) const;
  // Throws PeerFailure when `peer` left, failed or its process exited.
  void checkPeer(int peer, const char* what);
  [[noreturn]] void failTimeout(int peer, const char* what);
  void markGone(uint32_t state) noexcept;
  std::string nameOf(int r) const { return "rank " + std::to_string(rankNames_[r]); }

  Segment segment_;
  Shared* shared_;
  char* slots_;
  const int rank_;
  const int size_;
  const size_t slotBytes_;
  const std::chrono::milliseconds timeout_;
  const std::string role_;
  const std::vector<int> rankNames_;
  uint32_t phase_ = 0;
  std::vector<int> pidfds_;  // by rank; -1: same process, or unavailable
  std::vector<pid_t> pids_;  // by rank
  std::shared_ptr<Arena> arena_;
  std::vector<Arena::Mapping> peerArenas_;  // by rank
  bool failed_ = false;
  bool failedByTimeout_ = false;
  std::string failure_;
};

}  // namespace kolo::comm::shm
