// Enqueue-time checks of CUDA requests (engine/request_check.h): what each
// build and GPU data plane accepts. The pointers are host memory: the
// checks never dereference them.
#include <gtest/gtest.h>

#include <vector>

#include "engine/request_check.h"
#include "kolo/build_config.h"

namespace kolo {
namespace {

struct RequestCheck : ::testing::Test {
  std::vector<int16_t> data = std::vector<int16_t>(8);
  ProcessSetInfo set{0, {0, 1}, 0};
  Config config;

  Request cuda(OpType op, DataType dtype, ReduceOp reduce = ReduceOp::kSum) {
    Request q;
    q.name = "t";
    q.op = op;
    q.dtype = dtype;
    q.shape = {4};
    q.reduceOp = reduce;
    q.device = DeviceKind::kCuda;
    q.deviceIndex = 0;
    return q;
  }
  Entry entry() {
    Entry e;
    e.input = data.data();
    e.output = data.data();
    e.allocate = [this](const std::vector<int64_t>&) { return static_cast<void*>(data.data()); };
    return e;
  }
  // The refusal's message, or "" when accepted.
  std::string check(const Request& q) {
    try {
      checkRequest(q, entry(), set, config);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(RequestCheck, CudaTensorsNeedACudaBuild) {
  const std::string err = check(cuda(OpType::kAllreduce, DataType::kFloat32));
  if (KOLO_WITH_CUDA) {
    EXPECT_EQ(err, "");
  } else {
    EXPECT_NE(err.find("no CUDA support"), std::string::npos) << err;
    EXPECT_NE(err.find("move it to the CPU"), std::string::npos) << err;
  }
}

TEST_F(RequestCheck, EveryOpAndDtypeOfCudaTensorsIsAcceptedWhereTheDataPlaneHasIt) {
  if (!KOLO_WITH_CUDA) GTEST_SKIP() << "build without CUDA: every CUDA tensor is refused";
  for (const char* plane : {"nccl", "gloo", "mpi"}) {
    config.gpuOperations = plane;
    for (int d = 0; d < kNumDataTypes; ++d) {
      const auto dtype = static_cast<DataType>(d);
      for (OpType op : {OpType::kAllreduce, OpType::kAllgather, OpType::kBroadcast,
                        OpType::kAlltoall, OpType::kReducescatter}) {
        const bool reduces = op == OpType::kAllreduce || op == OpType::kReducescatter;
        const bool refused = reduces && dtype == DataType::kInt16 &&
                             config.gpuOperations == "nccl";
        const std::string err = check(cuda(op, dtype));
        EXPECT_EQ(err.empty(), !refused)
            << plane << " " << toString(op) << " " << toString(dtype) << ": " << err;
      }
    }
  }
}

TEST_F(RequestCheck, Int16ReductionsOnNcclAreRefusedWithTheFix) {
  if (!KOLO_WITH_CUDA) GTEST_SKIP() << "build without CUDA";
  const std::string err = check(cuda(OpType::kReducescatter, DataType::kInt16));
  EXPECT_NE(err.find("'t' (reducescatter)"), std::string::npos) << err;
  EXPECT_NE(err.find("NCCL has no 16-bit integer type"), std::string::npos) << err;
  EXPECT_NE(err.find("KOLO_GPU_OPERATIONS=gloo"), std::string::npos) << err;
  config.gpuOperations = "gloo";
  EXPECT_EQ(check(cuda(OpType::kReducescatter, DataType::kInt16)), "");
}

TEST_F(RequestCheck, AdasumOfCudaTensorsIsRefusedOnEveryDataPlane) {
  for (const char* plane : {"nccl", "gloo", "mpi"}) {
    config.gpuOperations = plane;
    const std::string err = check(cuda(OpType::kAllreduce, DataType::kFloat32, ReduceOp::kAdasum));
    EXPECT_NE(err.find("Adasum of CUDA tensors is not supported"), std::string::npos)
        << plane << ": " << err;
  }
}

}  // namespace
}  // namespace kolo
