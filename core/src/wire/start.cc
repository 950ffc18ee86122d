#include "wire/start.h"

#include "wire/bytes.h"

namespace kolo::wire {

std::vector<char> encode(const StartRequest& request) {
  ByteWriter w;
  w.str(request.host);
  w.str(request.sets);
  return w.take();
}

StartRequest decodeStartRequest(const std::vector<char>& bytes) {
  ByteReader r(bytes, "start-up");
  StartRequest request;
  request.host = r.str();
  request.sets = r.str();
  r.done();
  return request;
}

std::vector<char> encode(const StartSummary& summary) {
  ByteWriter w;
  w.str(summary.mismatch);
  w.u32(static_cast<uint32_t>(summary.hosts.size()));
  for (const auto& host : summary.hosts) w.str(host);
  return w.take();
}

StartSummary decodeStartSummary(const std::vector<char>& bytes, int size) {
  ByteReader r(bytes, "start-up summary");
  StartSummary summary;
  summary.mismatch = r.str();
  const uint32_t n = r.count();
  if (static_cast<int64_t>(n) != size) r.fail(std::to_string(n) + " hosts for " +
                                               std::to_string(size) + " ranks");
  summary.hosts.reserve(n);
  for (uint32_t i = 0; i < n; ++i) summary.hosts.push_back(r.str());
  r.done();
  return summary;
}

}  // namespace kolo::wire
