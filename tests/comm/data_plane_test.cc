// The collectives conformance suite against the CPU data plane as the
// engine builds it (comm::createCpuDataPlane), with ranks placed two per
// "host" (Config::hostKeyOverride): 2 ranks are one host (shared memory),
// 3 are hosts of 2 and 1 (flat Gloo: the fallback), 4 and 8 are 2 and 4
// hosts of 2 (hierarchical: shared memory within hosts, Gloo across).
// A second instance keeps two-level allreduce but makes allgather and
// broadcast flat, as KOLO_HIERARCHICAL_ALLGATHER=0 does.
#include <chrono>
#include <string>
#include <thread>

#include "comm/conformance.h"
#include "comm/select.h"
#include "kolo/error.h"

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

// Two hosts of two ranks: rank 3 closes its data plane while the others are
// in an allreduce. Rank 2 (its host) sees it through shared memory, rank 1
// (its peer across hosts) through Gloo, and rank 0, which waits on neither,
// because the failing ranks close all their planes: everyone fails at once,
// not after the timeout, and keeps failing at once.
TEST(HierarchicalDataPlane, OneRankLeavingFailsEveryRankPromptly) {
  Config config = commConfig();
  config.timeout = std::chrono::seconds(10);
  std::vector<std::string> first(4), second(4);
  std::vector<double> seconds(4, 0);
  runWithArgs(
      4,
      [&](int rank, const comm::BackendArgs& args) {
        auto plane = twoPerHost(args, true);
        ASSERT_EQ(std::string(plane->name()), "hierarchical_gloo");
        if (rank == 3) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          plane.reset();
          return;
        }
        std::vector<float> buf(1 << 18, 1.0f);
        const auto start = std::chrono::steady_clock::now();
        try {
          plane->allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
        } catch (const PeerFailure& e) {
          first[rank] = e.what();
        }
        seconds[rank] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const auto again = std::chrono::steady_clock::now();
        try {
          plane->allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
        } catch (const PeerFailure& e) {
          second[rank] = e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - again, std::chrono::milliseconds(100));
      },
      config);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_FALSE(first[rank].empty()) << "rank " << rank << " did not fail";
    EXPECT_LT(seconds[rank], 3.0) << "rank " << rank << ": " << first[rank];
    EXPECT_NE(second[rank].find("failed earlier"), std::string::npos) << second[rank];
  }
  // Rank 3 is named by its global rank, not its rank on its host.
  EXPECT_NE(first[2].find("rank 3"), std::string::npos) << first[2];
}

}  // namespace
}  // namespace kolo::test
