// The comm conformance suite (tests/comm) against the GPU data planes, with
// every buffer mirrored in device memory: NCCL at size 1 (NCCL refuses two
// ranks on one GPU) and Gloo over pinned staging at 1, 2 and 4 ranks sharing
// one GPU. Without a GPU nothing is instantiated and GpuConformance.Device
// says why.
#include <vector>

#include "comm/conformance.h"
#include "comm/gloo/factory.h"
#include "device_mirror.h"
#include "gpu_test_util.h"
#include "kolo/build_config.h"

namespace kolo::test {
namespace {

std::vector<int> sizesIfGpu(std::vector<int> sizes) {
  return noGpuReason().empty() ? sizes : std::vector<int>{};
}

const CommBackend kGlooStaged{"GlooStagedGpu", comm::gloo::createControlChannel,
                              [](const comm::BackendArgs& args) {
                                return createMirroredGpuCollectives("gloo", args);
                              }};

INSTANTIATE_TEST_SUITE_P(GlooStagedGpu, CollectivesConformance,
                         ::testing::Combine(::testing::Values(kGlooStaged),
                                            ::testing::ValuesIn(sizesIfGpu({1, 2, 4}))),
                         commTestName);

#if KOLO_WITH_NCCL
const CommBackend kNccl{"NcclGpu", comm::gloo::createControlChannel,
                        [](const comm::BackendArgs& args) {
                          return createMirroredGpuCollectives("nccl", args);
                        }};

INSTANTIATE_TEST_SUITE_P(NcclGpu, CollectivesConformance,
                         ::testing::Combine(::testing::Values(kNccl),
                                            ::testing::ValuesIn(sizesIfGpu({1}))),
                         commTestName);
#endif

TEST(GpuConformance, Device) {
  KOLO_REQUIRE_GPU();
  SUCCEED() << "conformance instantiated for the GPU data planes";
}

}  // namespace
}  // namespace kolo::test

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CollectivesConformance);
