#include "comm/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "kolo/error.h"

namespace kolo::comm::shm {
namespace {

constexpr char kPrefix[] = "/kolo-";
constexpr size_t kHexDigits = 32;

std::string errnoText(int err) { return std::strerror(err); }

std::string randomName() {
  unsigned char bytes[kHexDigits / 2];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Internal("shm: getrandom failed: " + errnoText(errno));
    }
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string name = kPrefix;
  for (unsigned char b : bytes) {
    name += kHex[b >> 4];
    name += kHex[b & 15];
  }
  return name;
}

char* mapShared(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd);
    throw Internal("shm: cannot map " + std::to_string(bytes) + " bytes of " + name + ": " +
                   errnoText(err));
  }
  close(fd);
  return static_cast<char*>(p);
}

}  // namespace

bool Segment::validName(const std::string& name) {
  const size_t prefix = sizeof(kPrefix) - 1;
  if (name.size() != prefix + kHexDigits || name.compare(0, prefix, kPrefix) != 0) return false;
  for (size_t i = prefix; i < name.size(); ++i) {
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Segment Segment::create(size_t bytes) {
  KOLO_ENFORCE(bytes > 0, "shm: empty segment");
  for (int attempt = 0;; ++attempt) {
    std::string name = randomName();
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == EEXIST && attempt < 3) continue;  // 128 random bits: never, in practice
      throw Internal("shm: cannot create a shared-memory segment in /dev/shm: " + errnoText(errno) +
                     " (set KOLO_SHM=0 to use the network data plane)");
    }
    // fchmod: a restrictive umask cannot widen 0600, but make the mode exact.
    fchmod(fd, 0600);
    int rc;
    do {
      rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    } while (rc == EINTR);
    if (rc != 0) {
      close(fd);
      shm_unlink(name.c_str());
      throw Internal("shm: cannot reserve " + std::to_string(bytes) +
                     " bytes in /dev/shm: " + errnoText(rc) +
                     " (is /dev/shm full? set KOLO_SHM=0 to use the network data plane)");
    }
    try {
      return Segment(mapShared(fd, bytes, name), bytes, name);
    } catch (...) {
      shm_unlink(name.c_str());
      throw;
    }
  }
}

Segment Segment::open(const std::string& name, size_t bytes) {
  KOLO_CHECK_ARG(validName(name), "shm: the rendezvous store gave a malformed segment name ('" +
                                      name.substr(0, 64) + "')");
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    throw Internal("shm: cannot open shared-memory segment " + name + ": " + errnoText(errno) +
                   " (do all ranks of this host see the same /dev/shm? set KOLO_SHM=0 to use "
                   "the network data plane)");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    throw Internal("shm: cannot stat " + name + ": " + errnoText(err));
  }
  if (st.st_uid != geteuid() || (st.st_mode & 0077) != 0) {
    close(fd);
    throw InvalidArgument("shm: segment " + name +
                          " is not private to this user (owner or mode differ); refusing it");
  }
  if (static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    throw InvalidArgument("shm: segment " + name + " has " + std::to_string(st.st_size) +
                          " bytes, expected " + std::to_string(bytes) +
                          " (do all ranks run the same kolo version and settings?)");
  }
  return Segment(mapShared(fd, bytes, name), bytes, name);
}

void Segment::unlink(const std::string& name) noexcept {
  if (validName(name)) shm_unlink(name.c_str());
}

Segment::~Segment() {
  if (data_ != nullptr) munmap(data_, size_);
}

Segment::Segment(Segment&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      name_(std::move(other.name_)) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    name_ = std::move(other.name_);
  }
  return *this;
}

}  // namespace kolo::comm::shm
