// Wire protocol of the TCP store (version "kolo-store-v1").
//
// Every message is a frame: u32 big-endian payload length, then the payload.
// A frame longer than kMaxFrameSize is a protocol error. Payload fields are
// big-endian integers and length-prefixed byte strings:
//
//   request  := u8 command, then
//     SET   key, value          GET  key, u64 timeout_ms
//     WAIT  u32 n, n * key, u64 timeout_ms
//     ADD   key, i64 delta      CHECK key
//     MULTI_GET  u32 n, n * key, u64 timeout_ms
//     CHECK_MANY u32 n, n * key
//   response := u8 status, then
//     OK      GET: value | ADD: i64 | CHECK: u8 | SET, WAIT: nothing
//             MULTI_GET: u32 n, n * value (in the order of the keys)
//             CHECK_MANY: u32 n, n * u8
//     TIMEOUT message
//     ERROR   u8 kolo::ErrorCode, message
//
// Requests on one connection are strictly sequential: one request, one
// response. Byte strings are u32 length + bytes. Decoding is bounds-checked;
// any violation raises ProtocolError.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/socket.h"

namespace kolo::rendezvous {

constexpr uint32_t kMaxFrameSize = 64u << 20;  // 64 MiB
// A connection must finish authenticating within this time.
constexpr std::chrono::seconds kHandshakeTimeout{10};

enum class Command : uint8_t {
  kSet = 1,
  kGet = 2,
  kWait = 3,
  kAdd = 4,
  kCheck = 5,
  kMultiGet = 6,
  kCheckMany = 7,
};
enum class Reply : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

// A malformed payload; the receiving side drops the connection.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Appends fields to a payload.
class Writer {
 public:
  Writer& u8(uint8_t v);
  Writer& u32(uint32_t v);
  Writer& u64(uint64_t v);
  Writer& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  Writer& bytes(const char* data, size_t len);
  Writer& bytes(const std::string& s) { return bytes(s.data(), s.size()); }
  Writer& bytes(const std::vector<char>& v) { return bytes(v.data(), v.size()); }
  // Raw bytes without a length prefix (fixed-size fields such as nonces).
  Writer& raw(const void* data, size_t len);

  const std::vector<char>& data() const { return data_; }
  std::vector<char> take() { return std::move(data_); }

 private:
  std::vector<char> data_;
};

// Reads fields from a payload; throws ProtocolError on any overrun.
class Reader {
 public:
  explicit Reader(const std::vector<char>& data) : data_(data) {}

  uint8_t u8();
  uint32_t u32();
  uint64_t u64();
  int64_t i64() { return static_cast<int64_t>(u64()); }
  std::string string();
  std::vector<char> bytes();
  void raw(void* out, size_t len);
  // Throws unless every byte was consumed.
  void expectEnd() const;

 private:
  const char* take(size_t len);

  const std::vector<char>& data_;
  size_t pos_ = 0;
};

// Frame I/O bounded by deadline and interruptible by stopFd (see socket.h).
// readFrame returns kTooLarge, without reading the payload, when the length
// exceeds maxSize.
IoResult writeFrame(int fd, const std::vector<char>& payload, Deadline deadline,
                    int stopFd = -1);
IoResult readFrame(int fd, std::vector<char>* payload, uint32_t maxSize,
                   Deadline deadline, int stopFd = -1);

}  // namespace kolo::rendezvous
