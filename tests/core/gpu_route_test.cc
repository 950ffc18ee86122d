// KOLO_GPU_OPERATIONS routing (comm/gpu_route.h): which data plane carries
// CUDA tensors, for every choice and build.
#include <gtest/gtest.h>

#include "comm/gpu_route.h"
#include "kolo/error.h"

namespace kolo::comm {
namespace {

const GpuBuild kFull{true, true, true};

std::string refusal(const std::string& choice, const GpuBuild& build) {
  try {
    routeGpuOperations(choice, build, [] { return false; });
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(GpuRoute, NcclIsDirect) {
  GpuRoute r = routeGpuOperations("nccl", kFull, [] { return false; });
  EXPECT_EQ(r.backend, "nccl");
  EXPECT_FALSE(r.staged);
  EXPECT_EQ(r.name(), "nccl");
}

TEST(GpuRoute, GlooAlwaysStages) {
  GpuRoute r = routeGpuOperations("gloo", kFull, [] { return true; });
  EXPECT_EQ(r.backend, "gloo");
  EXPECT_TRUE(r.staged);
  EXPECT_EQ(r.name(), "gloo+staging");
}

TEST(GpuRoute, MpiGoesDirectOnlyWhenCudaAware) {
  EXPECT_EQ(routeGpuOperations("mpi", kFull, [] { return true; }).name(), "mpi");
  EXPECT_EQ(routeGpuOperations("mpi", kFull, [] { return false; }).name(), "mpi+staging");
}

TEST(GpuRoute, MpiIsAskedOnlyForMpi) {
  int asked = 0;
  auto ask = [&] { return ++asked > 0; };
  routeGpuOperations("nccl", kFull, ask);
  routeGpuOperations("gloo", kFull, ask);
  EXPECT_EQ(asked, 0);
  routeGpuOperations("mpi", kFull, ask);
  EXPECT_EQ(asked, 1);
}

TEST(GpuRoute, RefusesWhatTheBuildLacks) {
  EXPECT_NE(refusal("nccl", {false, false, false}).find("no CUDA support"), std::string::npos);
  EXPECT_NE(refusal("gloo", {false, false, true}).find("KOLO_WITH_CUDA=ON"), std::string::npos);
  const std::string nccl = refusal("nccl", {true, false, true});
  EXPECT_NE(nccl.find("KOLO_GPU_OPERATIONS=nccl"), std::string::npos) << nccl;
  EXPECT_NE(nccl.find("no NCCL"), std::string::npos) << nccl;
  EXPECT_NE(refusal("mpi", {true, true, false}).find("no MPI"), std::string::npos);
  EXPECT_NE(refusal("shm", kFull).find("use nccl, mpi or gloo"), std::string::npos);
}

}  // namespace
}  // namespace kolo::comm
