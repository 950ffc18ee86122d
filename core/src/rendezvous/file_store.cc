// FileStore: one file per key in a directory every rank can see.
//
// set() writes a temporary file and renames it over the key's file, so a
// reader sees either no file or the whole value. add() serializes
// read-modify-write with flock() on DIR/.lock, which excludes other
// processes and other threads alike (each call opens its own descriptor).
// get()/wait() poll with short, growing sleeps until their deadline.
// Thread-safe; holds no lock between calls.
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>
#include <utility>

#include "kolo/error.h"
#include "kolo/store.h"
#include "rendezvous/key_value_map.h"
#include "rendezvous/socket.h"

namespace kolo {

using namespace rendezvous;

namespace {

// Longer escaped names are replaced by a digest (NAME_MAX is 255).
constexpr size_t kMaxFileNameLength = 200;
constexpr auto kFirstPoll = std::chrono::milliseconds(1);
constexpr auto kMaxPoll = std::chrono::milliseconds(20);

std::string hexByte(unsigned char c) {
  const char* digits = "0123456789abcdef";
  return {digits[c >> 4], digits[c & 0xf]};
}

// "k_" + key with every byte outside [A-Za-z0-9_.-] written as %hh, or
// "h_" + SHA-256 of the key when that is too long. Distinct keys give
// distinct names, and no name starts with '.' (reserved for .lock, .tmp-*).
std::string fileNameFor(const std::string& key) {
  std::string name = "k_";
  for (char ch : key) {
    auto c = static_cast<unsigned char>(ch);
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '.' || c == '-';
    name += plain ? std::string(1, ch) : "%" + hexByte(c);
  }
  if (name.size() <= kMaxFileNameLength) return name;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(key.data(), key.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    throw Internal("file store: SHA-256 of a key failed");
  }
  name = "h_";
  for (unsigned int i = 0; i < len; ++i) name += hexByte(digest[i]);
  return name;
}

void makeDirectories(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      throw InvalidArgument("file store: cannot create directory '" + prefix +
                            "': " + errnoText(errno));
    }
  }
}

class FileStore : public Store {
 public:
  explicit FileStore(std::string directory) : directory_(std::move(directory)) {
    if (directory_.empty()) throw InvalidArgument("file store: empty directory path");
    while (directory_.size() > 1 && directory_.back() == '/') directory_.pop_back();
    makeDirectories(directory_);
    // Proves up front that the directory is usable (fails fast on EACCES).
    Fd lock = openLockFile();
  }

  void set(const std::string& key, const std::vector<char>& value) override {
    writeAtomically(pathFor(key), value.data(), value.size());
  }

  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::string path = pathFor(key);
    std::optional<std::vector<char>> value;
    pollUntil([&] { return (value = readFile(path)).has_value(); }, {key}, timeout);
    return *value;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    pollUntil([&] { return missing(keys).empty(); }, keys, timeout);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    std::string path = pathFor(key);
    Fd lock = openLockFile();
    while (::flock(lock.get(), LOCK_EX) != 0) {
      if (errno != EINTR) throw Internal("file store: flock(): " + errnoText(errno));
    }
    int64_t value = 0;
    if (auto old = readFile(path)) {
      std::string text(old->begin(), old->end());
      char* end = nullptr;
      errno = 0;
      long long parsed = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
        throw InvalidArgument("file store: add() on key '" + key +
                              "' whose value is not a decimal integer");
      }
      value = parsed;
    }
    if (__builtin_add_overflow(value, delta, &value)) {
      throw InvalidArgument("file store: add(" + std::to_string(delta) + ") on key '" + key +
                            "' overflows int64");
    }
    std::string text = std::to_string(value);
    writeAtomically(path, text.data(), text.size());
    return value;  // closing `lock` releases the flock
  }

  bool check(const std::string& key) override {
    return ::access(pathFor(key).c_str(), F_OK) == 0;
  }

 private:
  std::string pathFor(const std::string& key) const {
    return directory_ + "/" + fileNameFor(key);
  }

  Fd openLockFile() const {
    std::string path = directory_ + "/.lock";
    Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd.valid()) {
      throw InvalidArgument("file store: cannot open '" + path + "': " + errnoText(errno));
    }
    return fd;
  }

  std::string missing(const std::vector<std::string>& keys) const {
    std::string out;
    for (const auto& key : keys) {
      if (::access(pathFor(key).c_str(), F_OK) != 0) out += (out.empty() ? "" : ", ") + key;
    }
    return out;
  }

  // Calls ready() until it returns true; throws Timeout naming the keys
  // still missing once timeout has passed (ready() is tried at least once).
  template <typename Ready>
  void pollUntil(Ready ready, const std::vector<std::string>& keys,
                 std::chrono::milliseconds timeout) {
    Deadline deadline = deadlineAfter(timeout);
    auto sleep = std::chrono::duration_cast<Clock::duration>(kFirstPoll);
    for (;;) {
      if (ready()) return;
      auto now = Clock::now();
      if (now >= deadline) break;
      std::this_thread::sleep_for(std::min<Clock::duration>(sleep, deadline - now));
      sleep = std::min<Clock::duration>(sleep * 2, kMaxPoll);
    }
    throw Timeout("file store at " + directory_ + ": " + timeoutMessage(timeout, missing(keys)));
  }

  // Whole contents of path, or nullopt when it does not exist.
  static std::optional<std::vector<char>> readFile(const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) {
      if (errno == ENOENT) return std::nullopt;
      throw Internal("file store: cannot open '" + path + "': " + errnoText(errno));
    }
    std::vector<char> data;
    char buffer[64 << 10];
    for (;;) {
      ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Internal("file store: cannot read '" + path + "': " + errnoText(errno));
      if (n == 0) return data;
      data.insert(data.end(), buffer, buffer + n);
    }
  }

  void writeAtomically(const std::string& path, const char* data, size_t len) const {
    std::string temp = directory_ + "/.tmp-XXXXXX";
    Fd fd(::mkostemp(temp.data(), O_CLOEXEC));
    if (!fd.valid()) {
      throw Internal("file store: cannot create a file in '" + directory_ + "': " +
                     errnoText(errno));
    }
    auto fail = [&](const std::string& step) {
      int err = errno;
      ::unlink(temp.c_str());
      return Internal("file store: " + step + " '" + path + "': " + errnoText(err));
    };
    while (len > 0) {
      ssize_t n = ::write(fd.get(), data, len);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw fail("cannot write");
      data += n;
      len -= static_cast<size_t>(n);
    }
    // mkstemp creates 0600; other users of a shared directory may need to read.
    ::fchmod(fd.get(), 0644);
    fd.reset();
    if (::rename(temp.c_str(), path.c_str()) != 0) throw fail("cannot rename into");
  }

  std::string directory_;
};

}  // namespace

std::shared_ptr<Store> makeFileStore(const std::string& directory) {
  return std::make_shared<FileStore>(directory);
}

}  // namespace kolo
