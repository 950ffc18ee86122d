#include "wire/stall.h"

#include "wire/bytes.h"

namespace kolo::wire {

std::vector<char> encode(const std::vector<PendingAge>& pending) {
  ByteWriter w;
  w.u32(static_cast<uint32_t>(pending.size()));
  for (const auto& p : pending) {
    w.str(p.name);
    w.i64(p.ageMs);
    w.str(p.what);
  }
  return w.take();
}

std::vector<PendingAge> decodePending(const std::vector<char>& bytes) {
  ByteReader r(bytes, "stall check");
  std::vector<PendingAge> out(r.count());
  for (auto& p : out) {
    p.name = r.str();
    p.ageMs = r.i64();
    p.what = r.str();
  }
  r.done();
  return out;
}

std::vector<char> encode(const StallReport& report) {
  ByteWriter w;
  w.u32(report.shutdown ? 1 : 0);
  w.str(report.warning);
  w.str(report.shutdownMessage);
  return w.take();
}

StallReport decodeReport(const std::vector<char>& bytes) {
  ByteReader r(bytes, "stall check");
  StallReport report;
  report.shutdown = r.u32() != 0;
  report.warning = r.str();
  report.shutdownMessage = r.str();
  r.done();
  return report;
}

}  // namespace kolo::wire
