#include "comm/shm/arena.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <iterator>
#include <string>
#include <utility>

#include "kolo/shareable.h"

namespace kolo::comm::shm {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kMinReserveBytes = size_t(1) << 30;
constexpr char kMemfdName[] = "kolo-arena";

size_t pagesOf(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

int memfdCreate(const char* name) {
#ifdef SYS_memfd_create
  return static_cast<int>(syscall(SYS_memfd_create, name, MFD_CLOEXEC));
#else
  (void)name;
  errno = ENOSYS;
  return -1;
#endif
}

// Maps fd's first bytes shared; null on failure.
char* mapFd(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

std::mutex gMu;
std::shared_ptr<Arena> gArena;  // this process's, once made
bool gTried = false;

}  // namespace

std::shared_ptr<Arena> Arena::forThisProcess() {
  std::lock_guard<std::mutex> lock(gMu);
  if (gTried) return gArena;
  gTried = true;
  // Under an address space limit (ulimit -v) the reservations (this one and
  // a peer's per peer) could starve the program's own allocations: none.
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur != RLIM_INFINITY) return nullptr;
  const int fd = memfdCreate(kMemfdName);
  if (fd < 0) return nullptr;
  // The largest reservation the system takes, from 64 GiB down to 1 GiB.
  for (size_t size = kReserveBytes; size >= kMinReserveBytes; size /= 2) {
    if (ftruncate(fd, static_cast<off_t>(size)) != 0) continue;
    if (char* base = mapFd(fd, size)) {
      gArena.reset(new Arena(fd, base, size));
      return gArena;
    }
  }
  close(fd);
  return nullptr;
}

std::shared_ptr<Arena> Arena::existing() {
  std::lock_guard<std::mutex> lock(gMu);
  return gArena;
}

Arena::~Arena() {
  munmap(base_, size_);
  close(fd_);
}

void* Arena::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t need = pagesOf(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (!initialised_) {
    free_.emplace(0, size_);
    initialised_ = true;
  }
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const size_t at = it->first;
    // Commit the pages now: a memory limit is a null here, not a SIGBUS
    // when the block is first written.
    if (fallocate(fd_, 0, static_cast<off_t>(at), static_cast<off_t>(need)) != 0) return nullptr;
    const size_t rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_.emplace(at + need, rest);
    used_.emplace(at, need);
    return base_ + at;
  }
  return nullptr;
}

void Arena::free(void* block) {
  if (block == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = used_.find(static_cast<size_t>(static_cast<char*>(block) - base_));
  if (it == used_.end()) return;
  size_t at = it->first;
  size_t bytes = it->second;
  used_.erase(it);
  // The pages go back to the system and read as zeros when reused.
  fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(at),
            static_cast<off_t>(bytes));
  auto next = free_.lower_bound(at);
  if (next != free_.end() && at + bytes == next->first) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      at = prev->first;
      bytes += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(at, bytes);
}

int64_t Arena::offsetOf(const void* p, size_t bytes) const {
  const char* c = static_cast<const char*>(p);
  if (c < base_ || c > base_ + size_ || bytes > static_cast<size_t>(base_ + size_ - c)) return -1;
  return c - base_;
}

Arena::Mapping Arena::mapPeer(pid_t pid, int fd) {
  static std::mutex mu;
  static std::map<std::pair<pid_t, int>, std::pair<std::weak_ptr<void>, size_t>> mapped;
  if (pid <= 0 || fd < 0) return {};
  if (pid == getpid()) {
    // A rank in this process (ranks as threads): its arena is ours.
    std::shared_ptr<Arena> own = existing();
    if (own == nullptr || own->fd() != fd) return {};
    return Mapping{own->base(), own->size(), own};
  }
  std::lock_guard<std::mutex> lock(mu);
  auto& cached = mapped[{pid, fd}];
  if (std::shared_ptr<void> keep = cached.first.lock()) {
    return Mapping{static_cast<char*>(keep.get()), cached.second, keep};
  }
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  // Only an arena: the link of a memfd reads "/memfd:<name> (deleted)".
  char link[64] = {};
  const ssize_t n = readlink(path.c_str(), link, sizeof link - 1);
  const std::string expected = std::string("/memfd:") + kMemfdName + " ";
  if (n <= 0 || std::string(link, static_cast<size_t>(n)).rfind(expected, 0) != 0) return {};
  const int peer = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (peer < 0) return {};
  struct stat st {};
  char* base = nullptr;
  size_t size = 0;
  if (fstat(peer, &st) == 0 && st.st_size >= static_cast<off_t>(kMinReserveBytes) &&
      st.st_size % static_cast<off_t>(kPage) == 0) {
    size = static_cast<size_t>(st.st_size);
    base = mapFd(peer, size);
  }
  close(peer);
  if (base == nullptr) return {};
  std::shared_ptr<void> keep(base, [size](void* b) { munmap(b, size); });
  cached = {keep, size};
  return Mapping{base, size, keep};
}

}  // namespace kolo::comm::shm

namespace kolo {

std::shared_ptr<void> allocateShareable(size_t bytes) {
  const std::shared_ptr<comm::shm::Arena> arena = comm::shm::Arena::existing();
  if (arena == nullptr) return nullptr;
  void* block = arena->allocate(bytes);
  if (block == nullptr) return nullptr;
  return std::shared_ptr<void>(block, [arena](void* b) { arena->free(b); });
}

}  // namespace kolo
