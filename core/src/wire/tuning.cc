#include "wire/tuning.h"

#include <cstdint>
#include <cstring>

#include "kolo/error.h"

namespace kolo::wire {
namespace {

constexpr uint32_t kDecisionVersion = 2;
constexpr size_t kDecisionBytes = 4 + 8 + 8 + 1 + 1 + 1;

}  // namespace

std::vector<char> encode(const TuningDecision& d) {
  std::vector<char> out(kDecisionBytes);
  char* p = out.data();
  const int64_t cycleUs = d.tunables.cycleTime.count();
  std::memcpy(p, &kDecisionVersion, 4);
  std::memcpy(p + 4, &d.tunables.fusionThresholdBytes, 8);
  std::memcpy(p + 12, &cycleUs, 8);
  p[20] = d.tunables.cacheEnabled ? 1 : 0;
  p[21] = d.final ? 1 : 0;
  p[22] = d.tunables.hierarchicalAllreduce ? 1 : 0;
  return out;
}

TuningDecision decodeDecision(const std::vector<char>& bytes) {
  if (bytes.size() != kDecisionBytes) {
    throw Internal("malformed autotune message: " + std::to_string(bytes.size()) + " bytes");
  }
  uint32_t version;
  int64_t cycleUs;
  TuningDecision d;
  std::memcpy(&version, bytes.data(), 4);
  std::memcpy(&d.tunables.fusionThresholdBytes, bytes.data() + 4, 8);
  std::memcpy(&cycleUs, bytes.data() + 12, 8);
  if (version != kDecisionVersion || d.tunables.fusionThresholdBytes < 0 || cycleUs < 0 ||
      static_cast<unsigned char>(bytes[20]) > 1 || static_cast<unsigned char>(bytes[21]) > 1 ||
      static_cast<unsigned char>(bytes[22]) > 1) {
    throw Internal("malformed autotune message: bad version or value");
  }
  d.tunables.cycleTime = std::chrono::microseconds(cycleUs);
  d.tunables.cacheEnabled = bytes[20] == 1;
  d.final = bytes[21] == 1;
  d.tunables.hierarchicalAllreduce = bytes[22] == 1;
  return d;
}

}  // namespace kolo::wire
