// The CPU data plane among the ranks of one host, over shared memory.
//
// Every rank owns a slot in the group's segment (group.h), split in two
// halves used alternately by consecutive steps, so one synchronisation per
// step suffices: publishing step s says "my inputs of step s (and, for
// allreduce, my results of step s-1) are in my slot"; by then the rank has
// finished reading step s-1, so a slot half is never rewritten while a peer
// still reads it. Buffers larger than a half go through in steps (chunks
// that stay in cache, so the only trips to memory are reading the caller's
// input and writing its output).
//
//   allreduce      up to kOneShotBytes: every rank copies its buffer in and
//                  reduces all of them itself (one synchronisation). Larger:
//                  per step, each rank copies the parts of its chunk that
//                  others reduce into its slot, reduces its own part
//                  straight from the peers' slots and its own buffer
//                  (reduce-scatter) into its slot (and, from
//                  kOwnInPlaceBytes on, into its buffer in the same pass),
//                  and copies the reduced parts out at the next step
//                  (allgather). allreduceScaled multiplies in the
//                  same reduction (the engine's average costs no pass).
//                  Direct, from kDirectBytes, when every rank's buffer
//                  lies in its process's Arena (arena.h: the reducer's
//                  gradient buckets) and every rank mapped every peer's:
//                  each rank reduces its part of all the buffers straight
//                  from them and writes the result into all of them, with
//                  nothing copied through the slots (one read and one
//                  write per byte of the buffer, against 2 + 2). The ranks
//                  learn where the buffers are in one synchronisation
//                  first; when any is not in an arena they go on with the
//                  slots (and where none is, that synchronisation was
//                  already the slots' first step: a rank whose buffer is
//                  not in its arena stages its first chunk before it).
//   reducescatter  the first half of that: each rank reduces its block.
//   allgatherv, broadcast, alltoallv
//                  copy in, then every reader copies out, per step.
//
// Reductions run in rank order (x0 op x1 op ...) whoever computes them, so
// every rank gets bitwise the same result, and go through
// kolo::reduceElements (every dtype and reduce op the engine has).
//
// Threading: as comm::Collectives (one calling thread, same order on every
// rank). Arguments are checked before any synchronisation, so a call that
// throws InvalidArgument on every rank leaves the group usable.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/collectives.h"
#include "comm/shm/group.h"

namespace kolo::comm::shm {

// Bytes of one rank's slot (two halves), for groups of up to
// kDataSegmentBytes / kDataSlotBytes ranks; larger groups get smaller slots
// (dataSlotBytes), so a host's segment stays within kDataSegmentBytes
// (containers often have a 64 MiB /dev/shm).
constexpr size_t kDataSlotBytes = size_t(4) << 20;
constexpr size_t kDataSegmentBytes = size_t(32) << 20;
constexpr size_t kMinDataSlotBytes = size_t(256) << 10;
size_t dataSlotBytes(int ranks);
// Allreduces up to this size take the one-shot path.
constexpr size_t kOneShotBytes = size_t(16) << 10;
// Allreduce and allgather results of at least this size are written to the
// caller's buffer with streaming (non-temporal) stores: a buffer of half the
// last-level cache or more leaves it anyway, and streaming skips reading
// every destination line before writing it (bench_shm_planes, 2 ranks:
// 16 MiB 4.05 -> 5.26 GB/s busbw, 64 MiB 4.10 -> 4.85; at 4 MiB, which stays
// in cache, streaming halves the speed).
constexpr size_t kStreamingBytes = size_t(16) << 20;

// From this size on, an allreduce's reduction writes each rank's own part
// into its buffer as well as into its slot, instead of copying it back out
// at the next step: one pass less over that part (bench_allreduce_sweep at 2
// ranks, kolo-shm time over MPI's: 1 MiB 0.91 -> 0.56, 4 MiB 1.12 -> 0.57,
// 16 MiB 0.52 -> 0.42; benchmarks/README.md). Smaller buffers stay in
// cache, where the longer reduction before the next synchronisation costs
// more than the copy it saves (128 KiB: 0.79 -> 1.07 or worse).
constexpr size_t kOwnInPlaceBytes = size_t(1) << 20;

// Allreduces of at least this size reduce buffers that lie in the ranks'
// arenas in place (direct, above): every one past the one-shot size.
constexpr size_t kDirectBytes = kOneShotBytes + 1;

class Collectives final : public comm::Collectives {
 public:
  explicit Collectives(std::unique_ptr<Group> group);

  const char* name() const override { return "shm"; }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  // The multiply rides on the reduction: no pass of its own.
  void allreduceScaled(void* buf, size_t count, DataType dtype, ReduceOp op,
                       double factor) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                  DataType dtype) override;
  void broadcast(void* buf, size_t count, DataType dtype, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& sendCounts, void* out,
                 const std::vector<size_t>& recvCounts, DataType dtype) override;
  void reducescatter(const void* in, void* out, const std::vector<size_t>& recvCounts,
                     DataType dtype, ReduceOp op) override;
  void abandon(const std::string& why) override { group_->abandon(why); }

  // Allreduces that reduced the ranks' buffers in place (direct, above).
  uint64_t directAllreduces() const { return directAllreduces_; }
  // The synchronisations this rank has published so far (tests).
  uint32_t synchronisations() const { return group_->phase(); }

 private:
  // Half h (0 or 1) of rank r's slot.
  char* half(int r, uint32_t h) const { return group_->slot(r) + h * halfBytes_; }
  // Starts an operation: waits until no peer still reads this rank's slot.
  void begin(const char* what);
  // Ends one: publishes that this rank has read everything it needed.
  void end();

  void oneShotAllreduce(char* buf, size_t count, DataType dtype, ReduceOp op, double factor);
  // Where pipelinedAllreduce starts: afresh; after begin() (directAllreduce
  // fell back); or with step 0's chunk staged and published by every rank
  // (directAllreduce fell back where no rank's buffer was in its arena).
  // kDone: directAllreduce reduced in place.
  enum class Start : uint8_t { kFresh, kBegun, kFirstChunkStaged, kDone };
  void pipelinedAllreduce(char* buf, size_t count, DataType dtype, ReduceOp op, double factor,
                          Start start);
  // kDone, or where pipelinedAllreduce goes on when some rank's buffer is
  // not in its arena.
  Start directAllreduce(char* buf, size_t count, DataType dtype, ReduceOp op, double factor);
  // How pipelinedAllreduce cuts count elements of es bytes: chunks of one
  // part per rank, steps chunks.
  struct Pipeline {
    size_t part = 0;
    size_t chunk = 0;
    size_t steps = 0;
  };
  Pipeline pipelineOf(size_t count, size_t es) const;
  // Copies the parts of chunk s of buf (cut as p) that the peers reduce
  // into our half s % 2.
  void stageChunk(const char* buf, size_t count, size_t es, const Pipeline& p, size_t s);
  void checkCounts(const std::vector<size_t>& counts, const char* what) const;

  std::unique_ptr<Group> group_;
  const size_t halfBytes_;
  // Every peer must have completed this phase before this rank rewrites its slot.
  uint32_t slotFree_ = 0;
  // Whether every rank is direct-capable: unknown (-1) until the first
  // exchange of buffer places; then the same on every rank, and when 0
  // large allreduces skip the exchange.
  int groupDirect_ = -1;
  // Where each rank's buffer lies in this process (directAllreduce's, kept
  // so that the call allocates nothing).
  std::vector<char*> directAt_;
  uint64_t directAllreduces_ = 0;
};

}  // namespace kolo::comm::shm
