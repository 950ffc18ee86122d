#include "rendezvous/protocol.h"

#include <cstdint>
#include <cstring>

namespace kolo::rendezvous {
namespace {

void putBigEndian(std::vector<char>& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t getBigEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

Writer& Writer::u8(uint8_t v) {
  data_.push_back(static_cast<char>(v));
  return *this;
}

Writer& Writer::u32(uint32_t v) {
  putBigEndian(data_, v, 4);
  return *this;
}

Writer& Writer::u64(uint64_t v) {
  putBigEndian(data_, v, 8);
  return *this;
}

Writer& Writer::bytes(const char* data, size_t len) {
  if (len > UINT32_MAX) throw ProtocolError("field of " + std::to_string(len) + " bytes");
  u32(static_cast<uint32_t>(len));
  return raw(data, len);
}

Writer& Writer::raw(const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  data_.insert(data_.end(), p, p + len);
  return *this;
}

const char* Reader::take(size_t len) {
  if (len > data_.size() - pos_) {
    throw ProtocolError("truncated message: needed " + std::to_string(len) +
                        " more bytes at offset " + std::to_string(pos_) + " of " +
                        std::to_string(data_.size()));
  }
  const char* p = data_.data() + pos_;
  pos_ += len;
  return p;
}

uint8_t Reader::u8() { return static_cast<uint8_t>(*take(1)); }
uint32_t Reader::u32() { return static_cast<uint32_t>(getBigEndian(take(4), 4)); }
uint64_t Reader::u64() { return getBigEndian(take(8), 8); }

std::string Reader::string() {
  uint32_t len = u32();
  const char* p = take(len);
  return std::string(p, len);
}

std::vector<char> Reader::bytes() {
  uint32_t len = u32();
  const char* p = take(len);
  return std::vector<char>(p, p + len);
}

void Reader::raw(void* out, size_t len) { std::memcpy(out, take(len), len); }

void Reader::expectEnd() const {
  if (pos_ != data_.size()) {
    throw ProtocolError(std::to_string(data_.size() - pos_) + " unexpected trailing bytes");
  }
}

IoResult writeFrame(int fd, const std::vector<char>& payload, Deadline deadline,
                    int stopFd) {
  if (payload.size() > kMaxFrameSize) return IoResult::kTooLarge;
  std::vector<char> header;
  putBigEndian(header, payload.size(), 4);
  // Small frames go out in one segment (TCP_NODELAY is on).
  constexpr size_t kCoalesceLimit = 16 << 10;
  if (payload.size() <= kCoalesceLimit) {
    header.insert(header.end(), payload.begin(), payload.end());
    return sendAll(fd, header.data(), header.size(), deadline, stopFd);
  }
  IoResult result = sendAll(fd, header.data(), header.size(), deadline, stopFd);
  if (result != IoResult::kOk) return result;
  return sendAll(fd, payload.data(), payload.size(), deadline, stopFd);
}

IoResult readFrame(int fd, std::vector<char>* payload, uint32_t maxSize,
                   Deadline deadline, int stopFd) {
  char header[4];
  IoResult result = recvAll(fd, header, sizeof(header), deadline, stopFd);
  if (result != IoResult::kOk) return result;
  auto len = static_cast<uint32_t>(getBigEndian(header, 4));
  if (len > maxSize) return IoResult::kTooLarge;
  payload->resize(len);
  if (len == 0) return IoResult::kOk;
  return recvAll(fd, payload->data(), len, deadline, stopFd);
}

}  // namespace kolo::rendezvous
