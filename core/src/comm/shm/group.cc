#include "comm/shm/group.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <new>
#include <thread>
#include <utility>

#include "kolo/error.h"

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace kolo::comm::shm {
namespace {

using Clock = std::chrono::steady_clock;

// ThreadSanitizer sees a phase word at each rank's own mapping of the
// segment, so a publish and the wait that sees it do not order accesses
// to memory all ranks reach at one address: the arena, when ranks are
// threads of one process (tests). Tell it, with the arena as the sync
// object. No code without ThreadSanitizer.
inline void tsanRelease([[maybe_unused]] void* arena) {
#if defined(__SANITIZE_THREAD__)
  if (arena != nullptr) __tsan_release(arena);
#endif
}
inline void tsanAcquire([[maybe_unused]] void* arena) {
#if defined(__SANITIZE_THREAD__)
  if (arena != nullptr) __tsan_acquire(arena);
#endif
}

constexpr uint64_t kMagic = 0x316d68736f6c6f6bULL;  // "kolosmh1"
constexpr uint32_t kVersion = 2;
constexpr size_t kLineBytes = 128;  // a rank's line: two cache lines (adjacent-line prefetch)
constexpr size_t kPageBytes = 4096;
// Spin, then yield, before sleeping on the futex: a peer that is a few
// microseconds behind costs no system call, and one that is descheduled
// gets the core back quickly. The pure spin is short: where ranks' threads
// outnumber the cores, the peer waited for may be queued behind the spinner
// on its core, and every microsecond of spin is a microsecond of its delay
// (a 20 us spin made a 4-byte allreduce of two ranks on two cores 60 us
// instead of 17-24 us). sched_yield returns at once when nothing else wants
// the core, so yielding costs a fast peer well under a microsecond.
constexpr auto kSpinTime = std::chrono::microseconds(2);
constexpr auto kYieldTime = std::chrono::microseconds(200);

enum State : uint32_t { kAttaching = 0, kAttached = 1, kLeft = 2, kFailed = 3 };

struct alignas(kLineBytes) RankLine {
  std::atomic<uint32_t> phase;     // futex word; written by its rank only
  std::atomic<uint32_t> sleepers;  // peers in FUTEX_WAIT on phase
  std::atomic<uint32_t> state;     // State; written by its rank only
  std::atomic<int32_t> pid;
  std::atomic<int32_t> arenaFd;       // its process's Arena's fd there; -1: none
  std::atomic<uint32_t> direct;       // 1: it has its arena and mapped every peer's
  std::atomic<int64_t> directOffset;  // its buffer's offset in its arena this op; -1: not there
};
static_assert(sizeof(RankLine) == kLineBytes, "one rank line");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be lock-free");

size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }
size_t linesOffset() { return kLineBytes; }
size_t slotsOffset(int size) {
  return alignUp(linesOffset() + static_cast<size_t>(size) * kLineBytes, kPageBytes);
}
size_t segmentBytes(int size, size_t slotBytes) {
  return slotsOffset(size) + static_cast<size_t>(size) * slotBytes;
}

// Relaxes the core while spinning (the sibling hyperthread, if any, runs).
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

int futexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  return static_cast<int>(
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0));
}

void futexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

int pidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

// True when the process behind pidfd has exited.
bool exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)) != 0;
}

// "stopped" when /proc says the process is in a stop state.
bool isStopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  const char state = text[close + 2];
  return state == 'T' || state == 't';
}

[[noreturn]] void throwAs(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::kTimeout:
      throw Timeout(message);
    case ErrorCode::kPeerFailure:
      throw PeerFailure(message);
    case ErrorCode::kInvalidArgument:
      throw InvalidArgument(message);
    case ErrorCode::kMismatch:
      throw Mismatch(message);
    case ErrorCode::kShutdown:
      throw ShutdownError(message);
    default:
      throw Internal(message);
  }
}

constexpr char kFailedPrefix[] = "failed: ";

std::string reportKey(int rank) { return "shm/attached/" + std::to_string(rank); }

}  // namespace

struct Group::Shared {
  uint64_t magic;
  uint32_t version;
  uint32_t size;
  uint64_t slotBytes;
  uint64_t totalBytes;
  std::atomic<uint32_t> attached;  // ranks that mapped the segment

  RankLine& line(int r) {
    return reinterpret_cast<RankLine*>(reinterpret_cast<char*>(this) + linesOffset())[r];
  }
};
static_assert(sizeof(Group::Shared) <= kLineBytes, "header fits before the rank lines");

std::unique_ptr<Group> Group::connect(const BackendArgs& args, size_t slotBytes, const char* role,
                                      std::vector<int> rankNames, bool shareArena) {
  const Identity& id = args.identity;
  KOLO_CHECK_ARG(
      id.size >= 1 && id.rank >= 0 && id.rank < id.size,
      "shm: bad identity rank " + std::to_string(id.rank) + " of size " + std::to_string(id.size));
  KOLO_CHECK_ARG(args.config.timeout.count() > 0, "shm: timeout must be positive");
  KOLO_ENFORCE(slotBytes % 64 == 0 && slotBytes > 0, "shm: slot size must be a multiple of 64");
  if (rankNames.empty()) {
    for (int r = 0; r < id.size; ++r) rankNames.push_back(r);
  }
  KOLO_ENFORCE(rankNames.size() == static_cast<size_t>(id.size), "shm: one name per rank");
  const size_t bytes = segmentBytes(id.size, slotBytes);
  Store& store = *args.store;
  const auto timeout = args.config.timeout;

  Segment segment;
  std::string name;
  std::string error;
  const std::shared_ptr<Arena> arena = shareArena ? Arena::forThisProcess() : nullptr;
  try {
    if (id.rank == 0) {
      try {
        segment = Segment::create(bytes);
      } catch (const std::exception& e) {
        // Peers wait for the name: give them the reason instead.
        const std::string text = std::string(kFailedPrefix) + e.what();
        store.set("shm/segment", std::vector<char>(text.begin(), text.end()));
        throw;
      }
      name = segment.name();
      auto* shared = new (segment.data()) Shared{};
      shared->magic = kMagic;
      shared->version = kVersion;
      shared->size = static_cast<uint32_t>(id.size);
      shared->slotBytes = slotBytes;
      shared->totalBytes = bytes;
      for (int r = 0; r < id.size; ++r) new (&shared->line(r)) RankLine{};
      store.set("shm/segment", std::vector<char>(name.begin(), name.end()));
    } else {
      auto value = store.get("shm/segment", timeout);
      name.assign(value.begin(), value.end());
      if (name.rfind(kFailedPrefix, 0) == 0) {
        const std::string why = name.substr(sizeof(kFailedPrefix) - 1);
        name.clear();
        throw Internal("rank 0 could not create the segment: " + why);
      }
      segment = Segment::open(name, bytes);
      const auto* shared = reinterpret_cast<const Shared*>(segment.data());
      if (shared->magic != kMagic || shared->version != kVersion ||
          shared->size != static_cast<uint32_t>(id.size) || shared->slotBytes != slotBytes ||
          shared->totalBytes != bytes) {
        throw InvalidArgument("shm: segment " + name +
                              " has an unexpected header (another kolo version or group size)");
      }
    }
    auto* shared = reinterpret_cast<Shared*>(segment.data());
    RankLine& mine = shared->line(id.rank);
    mine.pid.store(static_cast<int32_t>(getpid()));
    mine.arenaFd.store(arena != nullptr ? arena->fd() : -1);
    mine.direct.store(0);
    mine.directOffset.store(-1);
    mine.state.store(kAttached);
    if (shared->attached.fetch_add(1) + 1 == static_cast<uint32_t>(id.size)) {
      Segment::unlink(name);  // every rank has it mapped: nothing left behind from here on
    }
  } catch (const Timeout&) {
    throw;  // rank 0 never published: there is nothing to report to
  } catch (const std::exception& e) {
    error = std::string("rank ") + std::to_string(id.rank) + ": " + e.what();
  }
  // Every rank reports; every rank reads all reports, so a failure anywhere
  // fails everywhere with its own message instead of a timeout.
  store.set(reportKey(id.rank), error.empty() ? std::vector<char>{'o', 'k'}
                                              : std::vector<char>(error.begin(), error.end()));
  if (!error.empty()) {
    if (id.rank == 0 && !name.empty()) Segment::unlink(name);
    throw Internal(std::string("shm ") + role + " setup failed: " + error);
  }
  std::string firstError;
  try {
    // One request for all reports (start-up stays a few requests per rank).
    std::vector<std::string> keys;
    for (int r = 0; r < id.size; ++r) keys.push_back(reportKey(r));
    std::vector<std::vector<char>> reports;
    try {
      reports = store.multiGet(keys, timeout);
    } catch (const Timeout&) {
      // Some rank never reported; one that did may have said why.
      for (const auto& key : keys) {
        if (store.check(key)) reports.push_back(store.get(key, timeout));
      }
      if (std::all_of(reports.begin(), reports.end(),
                      [](const auto& r) { return r == std::vector<char>{'o', 'k'}; })) {
        throw;
      }
    }
    for (const auto& report : reports) {
      if (report != std::vector<char>{'o', 'k'}) {
        firstError.assign(report.begin(), report.end());
        break;
      }
    }
  } catch (...) {
    if (!name.empty()) Segment::unlink(name);
    throw;
  }
  if (!firstError.empty()) {
    if (!name.empty()) Segment::unlink(name);
    throw Internal(std::string("shm ") + role + " setup failed: " + firstError);
  }
  return std::unique_ptr<Group>(new Group(std::move(segment), id.rank, id.size, slotBytes, timeout,
                                          role, std::move(rankNames), arena));
}

Group::Group(Segment segment, int rank, int size, size_t slotBytes,
             std::chrono::milliseconds timeout, std::string role, std::vector<int> rankNames,
             std::shared_ptr<Arena> arena)
    : segment_(std::move(segment)),
      shared_(reinterpret_cast<Shared*>(segment_.data())),
      slots_(segment_.data() + slotsOffset(size)),
      rank_(rank),
      size_(size),
      slotBytes_(slotBytes),
      timeout_(timeout),
      role_(std::move(role)),
      rankNames_(std::move(rankNames)),
      arena_(std::move(arena)) {
  watchPeers();
  mapArenas();
}

void Group::mapArenas() {
  peerArenas_.assign(size_, Arena::Mapping{});
  if (arena_ == nullptr) return;
  bool all = true;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) {
      peerArenas_[r] = Arena::Mapping{arena_->base(), arena_->size(), arena_};
      continue;
    }
    peerArenas_[r] = Arena::mapPeer(pids_[r], shared_->line(r).arenaFd.load());
    all = all && peerArenas_[r].base != nullptr;
  }
  // Published with this rank's next phase, before any peer reads it.
  shared_->line(rank_).direct.store(all ? 1 : 0, std::memory_order_relaxed);
}

bool Group::directCapable(int r) const {
  return shared_->line(r).direct.load(std::memory_order_relaxed) == 1;
}

void Group::setDirectOffset(int64_t offset) {
  shared_->line(rank_).directOffset.store(offset, std::memory_order_relaxed);
}

int64_t Group::directOffsetOf(int r) const {
  return shared_->line(r).directOffset.load(std::memory_order_relaxed);
}

void Group::watchPeers() {
  pidfds_.assign(size_, -1);
  pids_.assign(size_, 0);
  const pid_t self = getpid();
  for (int r = 0; r < size_; ++r) {
    pids_[r] = shared_->line(r).pid.load();
    if (r == rank_ || pids_[r] == self || pids_[r] <= 0) continue;
    pidfds_[r] = pidfdOpen(pids_[r]);  // -1 (old kernel): liveness then by kill(pid, 0)
  }
}

Group::~Group() {
  markGone(failed_ ? kFailed : kLeft);
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
}

void Group::markGone(uint32_t state) noexcept {
  RankLine& mine = shared_->line(rank_);
  mine.state.store(state);
  futexWake(&mine.phase);
}

void Group::checkUsable(const char* what) const {
  if (!failed_) return;
  throwAs(
      failedByTimeout_ ? ErrorCode::kTimeout : ErrorCode::kPeerFailure,
      std::string("shm ") + what + ": the " + role_ + " data plane failed earlier: " + failure_);
}

void Group::publish() {
  tsanRelease(arena_.get());
  RankLine& mine = shared_->line(rank_);
  mine.phase.store(++phase_);  // seq_cst: ordered before the sleepers load below
  if (mine.sleepers.load() != 0) futexWake(&mine.phase);
}

bool Group::reached(int peer, uint32_t p) const {
  const uint32_t v = shared_->line(peer).phase.load(std::memory_order_acquire);
  return static_cast<int32_t>(v - p) >= 0;
}

void Group::waitAll(uint32_t p, const char* what) {
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) waitFor(r, p, what);
  }
}

void Group::waitFor(int peer, uint32_t p, const char* what) {
  waitForPhase(peer, p, what);
  tsanAcquire(arena_.get());
}

void Group::waitForPhase(int peer, uint32_t p, const char* what) {
  if (reached(peer, p)) return;
  const auto start = Clock::now();
  for (int i = 1;; ++i) {
    cpuRelax();
    if (reached(peer, p)) return;
    if (i % 64 == 0 && Clock::now() - start > kSpinTime) break;
  }
  while (Clock::now() - start < kYieldTime) {
    sched_yield();
    if (reached(peer, p)) return;
  }
  RankLine& line = shared_->line(peer);
  const auto deadline = start + timeout_;
  while (true) {
    checkPeer(peer, what);
    const auto now = Clock::now();
    if (now >= deadline) failTimeout(peer, what);
    const auto slice =
        std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(kSliceMs));
    line.sleepers.fetch_add(1);
    const uint32_t v = line.phase.load();  // seq_cst: after announcing the sleeper
    if (static_cast<int32_t>(v - p) < 0) futexWait(&line.phase, v, slice);
    line.sleepers.fetch_sub(1);
    if (reached(peer, p)) return;
  }
}

void Group::checkPeer(int peer, const char* what) {
  const uint32_t state = shared_->line(peer).state.load();
  std::string why;
  if (state == kLeft) {
    why = "closed its side (it shut down or failed)";
  } else if (state == kFailed) {
    why = "failed (see its own error)";
  } else if (pidfds_[peer] >= 0 ? exited(pidfds_[peer])
                                : (pids_[peer] > 0 && pids_[peer] != getpid() &&
                                   kill(pids_[peer], 0) != 0 && errno == ESRCH)) {
    why = "exited (process " + std::to_string(pids_[peer]) + ")";
  } else {
    return;
  }
  fail(PeerFailure("shm " + std::string(what) + ": " + nameOf(peer) + " " + why));
}

void Group::failTimeout(int peer, const char* what) {
  std::string how;
  if (pids_[peer] > 0 && pids_[peer] != getpid() && isStopped(pids_[peer])) {
    how = " (its process " + std::to_string(pids_[peer]) + " is stopped)";
  }
  fail(Timeout("shm " + std::string(what) + ": " + nameOf(peer) + " made no progress for " +
               std::to_string(timeout_.count()) + " ms" + how));
}

void Group::abandon(const std::string& why) noexcept {
  if (failed_) return;
  failed_ = true;
  failure_ = why;
  markGone(kFailed);
}

void Group::fail(const Error& error) {
  if (!failed_) {
    failedByTimeout_ = error.code() == ErrorCode::kTimeout;
    abandon(error.what());
  }
  throwAs(error.code(), error.what());
}

}  // namespace kolo::comm::shm
