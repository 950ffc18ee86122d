// The collectives conformance suite against the CPU data plane as the
// engine builds it (comm::createCpuDataPlane), with ranks placed two per
// "host" (Config::hostKeyOverride): 2 ranks are one host (shared memory),
// 3 are hosts of 2 and 1 (flat Gloo: the fallback), 4 and 8 are 2 and 4
// hosts of 2 (hierarchical: shared memory within hosts, Gloo across).
// A second instance keeps two-level allreduce but makes allgather and
// broadcast flat, as KOLO_HIERARCHICAL_ALLGATHER=0 does.
#include <string>

#include "comm/conformance.h"
#include "comm/select.h"

namespace kolo::test {
namespace {

std::unique_ptr<comm::Collectives> twoPerHost(const comm::BackendArgs& args,
                                              bool hierarchicalAllgather) {
  // Backends copy what they need from the config while they are built.
  Config config = args.config;
  config.hostKeyOverride = [](int rank) { return "host " + std::to_string(rank / 2); };
  config.hierarchicalAllgather = hierarchicalAllgather;
  return comm::createCpuDataPlane(
      comm::BackendArgs{config, args.identity, args.store, args.localAddress});
}

const CommBackend kTwoPerHost{"TwoPerHost", nullptr,
                              [](const comm::BackendArgs& args) { return twoPerHost(args, true); }};
const CommBackend kFlatAllgather{"FlatAllgather", nullptr, [](const comm::BackendArgs& args) {
                                   return twoPerHost(args, false);
                                 }};

INSTANTIATE_TEST_SUITE_P(TwoPerHost, CollectivesConformance,
                         ::testing::Combine(::testing::Values(kTwoPerHost),
                                            ::testing::Values(2, 3, 4, 8)),
                         commTestName);
INSTANTIATE_TEST_SUITE_P(FlatAllgather, CollectivesConformance,
                         ::testing::Combine(::testing::Values(kFlatAllgather),
                                            ::testing::Values(4)),
                         commTestName);

}  // namespace
}  // namespace kolo::test
