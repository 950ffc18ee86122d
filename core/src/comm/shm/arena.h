// Arena: this process's memory that the other ranks of its host can map,
// so the shared-memory plane reduces a buffer in it in place, reading and
// writing every rank's buffer directly instead of copying through the
// slots of the group's segment (collectives.h, "direct").
//
// One per process, made by the first shared-memory data group that
// connects (forThisProcess): an anonymous memfd (nothing in /dev/shm, so
// nothing is left behind when a process dies) of kReserveBytes, mapped
// once. Only the pages of live blocks hold memory: allocate() commits a
// block with fallocate (a full memory cgroup is then an error there, not a
// SIGBUS on first touch), free punches it out again. Blocks are page
// aligned and zero-filled.
//
// A peer maps the arena by opening /proc/<pid>/fd/<fd>, which the kernel
// allows only to processes that may inspect this one (the same user);
// the pid and fd travel through the group's segment, whose name only the
// job's ranks learned. Peer mappings are shared by every group of the
// process (mapPeer) and live as long as a group holds them: a peer that
// exits leaves its memory valid until then.
//
// Threading: allocate, free and contains from any thread.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace kolo::comm::shm {

class Arena {
 public:
  // Virtual size of every arena; only live blocks hold memory.
  static constexpr size_t kReserveBytes = size_t(64) << 30;

  // This process's arena, made on the first call; null when the system
  // cannot make one (no memfd_create) or the process has an address space
  // limit (ulimit -v, which the reservations could exhaust): the plane then
  // copies through its slots.
  static std::shared_ptr<Arena> forThisProcess();
  // The arena if forThisProcess made one, else null; makes none.
  static std::shared_ptr<Arena> existing();

  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // bytes (rounded up to pages) of zero-filled memory, or null when the
  // arena is full or the memory cannot be committed.
  void* allocate(size_t bytes);
  // Gives a block from allocate back (its pages with it).
  void free(void* block);

  // Offset of [p, p + bytes) in the arena, or -1 when it is not inside.
  int64_t offsetOf(const void* p, size_t bytes) const;

  int fd() const { return fd_; }
  char* base() const { return base_; }
  size_t size() const { return size_; }

  // A peer's arena mapped here: base null when it could not be.
  struct Mapping {
    char* base = nullptr;
    size_t size = 0;
    std::shared_ptr<void> keep;  // the mapping lives while this does
  };
  // The arena of process pid (its fd there), mapped here; empty when it
  // cannot be opened or mapped, or is not an arena. The same pid and fd
  // give the same mapping while anyone holds it.
  static Mapping mapPeer(pid_t pid, int fd);

 private:
  Arena(int fd, char* base, size_t size) : fd_(fd), base_(base), size_(size) {}

  const int fd_;
  char* const base_;
  const size_t size_;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> bytes, coalesced
  std::map<size_t, size_t> used_;  // offset -> bytes
  bool initialised_ = false;
};

}  // namespace kolo::comm::shm
