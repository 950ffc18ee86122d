#include "wire/control.h"

#include "wire/bytes.h"

namespace kolo::wire {
namespace {

constexpr uint8_t kAborted = 1;
constexpr uint8_t kShutdown = 2;

}  // namespace

std::vector<char> encodeStop(bool abort, bool shutdown, const std::string& abortMessage) {
  ByteWriter w;
  w.u8(static_cast<uint8_t>((abort ? kAborted : 0) | (shutdown ? kShutdown : 0)));
  w.str(abort ? abortMessage : std::string());
  return w.take();
}

std::vector<char> encodeStopSummary(const std::vector<std::vector<char>>& parts) {
  ByteWriter w;
  w.u32(static_cast<uint32_t>(parts.size()));
  for (const auto& part : parts) {
    ByteReader r(part, "stop");
    const uint8_t flags = r.u8();
    const std::string message = r.str();
    r.done();
    if (flags > (kAborted | kShutdown)) r.fail("bad flags");
    w.u8(flags);
    w.str(message);
  }
  return w.take();
}

StopInfo decodeStopSummary(const std::vector<char>& bytes, int size) {
  ByteReader r(bytes, "stop summary");
  const uint32_t n = r.count();
  if (static_cast<int64_t>(n) != size) r.fail("parts for " + std::to_string(n) + " ranks");
  StopInfo info;
  for (int rank = 0; rank < size; ++rank) {
    const uint8_t flags = r.u8();
    std::string message = r.str();
    if (flags & kAborted) {
      info.abortedRanks.push_back(rank);
      info.abortMessages.push_back(std::move(message));
    }
    if (flags & kShutdown) info.shutdownRanks.push_back(rank);
  }
  r.done();
  return info;
}

}  // namespace kolo::wire
