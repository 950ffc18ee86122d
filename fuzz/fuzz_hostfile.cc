// libFuzzer target: the launcher's host parsers (hosts.h). Contract: any text
// either parses or throws launcher::UsageError; a parsed list has hosts with
// positive slots that assignRanks can place ranks on.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "hosts.h"
#include "usage_error.h"

namespace {

void exercise(const std::vector<kolo::launcher::HostSlots>& hosts) {
  long total = 0;
  for (const auto& h : hosts) {
    if (h.host.empty() || h.slots < 1) std::abort();
    kolo::launcher::networkName(h.host);
    total += h.slots;
  }
  kolo::launcher::describeHosts(hosts);
  // Small np only: placement is linear in np.
  int np = static_cast<int>(std::min<long>(total, 64));
  auto ranks = kolo::launcher::assignRanks(hosts, np);
  if (static_cast<int>(ranks.size()) != np) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    std::istringstream in(text);
    exercise(kolo::launcher::parseHostfile(in, "fuzz.hosts"));
  } catch (const kolo::launcher::UsageError&) {
  }
  try {
    exercise(kolo::launcher::parseHostList(text));
  } catch (const kolo::launcher::UsageError&) {
  }
  return 0;
}
