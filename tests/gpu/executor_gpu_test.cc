// cuda::GpuExecutor, the hooks the engine's Executor calls for CUDA
// responses: fused allreduce with prescale/postscale/average and joined
// (neutral) tensors, reduce-scatter with scales, and NCCL failure handling.
// Needs a GPU.
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "comm/conformance.h"
#include "device/cuda/check.h"
#include "comm/cuda/device_set.h"
#include "comm/cuda/gpu_executor.h"
#include "comm/select.h"
#include "comm/test_values.h"
#include "gpu_test_util.h"
#include "kolo/build_config.h"
#include "kolo/error.h"
#include "kernels/reduce.h"

namespace kolo::test {
namespace {

using comm::cuda::DeviceTensor;
using comm::cuda::GpuExecutor;

std::unique_ptr<GpuExecutor> makeExecutor(const char* backend, const comm::BackendArgs& args) {
  auto devices = std::make_shared<comm::cuda::DeviceSet>();
  auto collectives = comm::createGpuCollectives(backend, args, devices);
  return std::make_unique<GpuExecutor>(devices, std::move(collectives), args.identity.rank,
                                       args.identity.size);
}

// Fused allreduce over n ranks of tensors with mixed counts; rank r's tensor
// t holds dataValue(seed = r + t + i). Tensor 1 is joined on the last rank
// when join is set. Compared with the CPU computation of the same formula.
void fusedAllreduce(const char* backend, int n, DataType dtype, ReduceOp op, double pre,
                    double post, bool join) {
  const std::vector<uint64_t> counts = {5, 1000, 0, 70001, 3};
  runWithArgs(n, [&](int rank, const comm::BackendArgs& args) {
    auto exec = makeExecutor(backend, args);
    const size_t es = elementSize(dtype);
    std::vector<std::unique_ptr<DeviceBytes>> in, out;
    std::vector<DeviceTensor> tensors;
    for (size_t t = 0; t < counts.size(); ++t) {
      TypedBuffer host(dtype, counts[t]);
      for (size_t i = 0; i < counts[t]; ++i) host.set(i, dataValue(dtype, rank + t + i));
      in.push_back(std::make_unique<DeviceBytes>(host.data(), counts[t] * es));
      out.push_back(std::make_unique<DeviceBytes>(counts[t] * es));
      const bool joined = join && t == 1 && rank == n - 1;
      tensors.push_back(DeviceTensor{joined ? nullptr : in.back()->get(), out.back()->get(),
                                     counts[t]});
    }
    exec->allreduce(0, tensors, dtype, op, pre, post);
    exec->synchronize(0);
    for (size_t t = 0; t < counts.size(); ++t) {
      if (join && t == 1 && rank == n - 1) continue;
      // CPU reference: prescale each rank's input, reduce, finish.
      TypedBuffer acc(dtype, counts[t]);
      for (int r = 0; r < n; ++r) {
        TypedBuffer x(dtype, counts[t]);
        const bool joined = join && t == 1 && r == n - 1;
        for (size_t i = 0; i < counts[t]; ++i) {
          x.set(i, joined ? 0 : dataValue(dtype, r + t + i));
        }
        if (joined) {
          for (size_t i = 0; i < counts[t]; ++i) {
            const uint64_t bits = device::neutralBits(dtype, op);
            std::memcpy(static_cast<char*>(x.data()) + i * es, &bits, es);
          }
        } else if (isFloatingPoint(dtype) && counts[t] > 0) {
          scaleElements(x.data(), counts[t], dtype, pre);
        }
        if (r == 0) {
          if (counts[t] > 0) std::memcpy(acc.data(), x.data(), counts[t] * es);
        } else if (counts[t] > 0) {
          reduceElements(acc.data(), acc.data(), x.data(), counts[t], dtype,
                         op == ReduceOp::kAverage ? ReduceOp::kSum : op);
        }
      }
      if (counts[t] > 0) {
        if (op == ReduceOp::kAverage && !isFloatingPoint(dtype)) {
          divideElements(acc.data(), counts[t], dtype, n);
        } else if (isFloatingPoint(dtype)) {
          scaleElements(acc.data(), counts[t], dtype,
                        op == ReduceOp::kAverage ? post / n : post);
        }
      }
      TypedBuffer got(dtype, counts[t]);
      out[t]->download(got.data());
      for (size_t i = 0; i < counts[t]; ++i) {
        // Floating averages may round differently (ncclAvg vs sum * 1/n).
        const double tol = isFloatingPoint(dtype) ? 1e-2 * (1 + std::abs(acc.get(i))) : 0;
        if (std::abs(got.get(i) - acc.get(i)) > tol) {
          failElement(std::string(backend) + " " + toString(dtype) + " " + toString(op) +
                          " tensor " + std::to_string(t),
                      i, got.get(i), acc.get(i));
        }
      }
    }
  });
}

TEST(GpuExecutor, NcclFusedAllreduceEveryDtypeAndOp) {
  KOLO_REQUIRE_GPU();
#if KOLO_WITH_NCCL
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                        ReduceOp::kProduct}) {
      if (op == ReduceOp::kAverage && dtype == DataType::kBool) continue;
      if (dtype == DataType::kInt16) continue;  // NCCL cannot reduce it (NcclTypes tests)
      const double pre = isFloatingPoint(dtype) ? 0.5 : 1.0;
      const double post = isFloatingPoint(dtype) ? 4.0 : 1.0;
      fusedAllreduce("nccl", 1, dtype, op, pre, post, false);
    }
  }
#else
  GTEST_SKIP() << "built without NCCL";
#endif
}

TEST(GpuExecutor, StagedGlooFusedAllreduceWithJoinedRank) {
  KOLO_REQUIRE_GPU();
  for (int n : {2, 3}) {
    for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
        const double pre = isFloatingPoint(dtype) ? 0.5 : 1.0;
        fusedAllreduce("gloo", n, dtype, op, pre, 1.0, true);
      }
    }
  }
}

TEST(GpuExecutor, SingleTensorIsReducedInPlace) {
  KOLO_REQUIRE_GPU();
#if KOLO_WITH_NCCL
  runWithArgs(1, [](int, const comm::BackendArgs& args) {
    auto exec = makeExecutor("nccl", args);
    std::vector<float> host(4097, 3.0f);
    DeviceBytes buf(host.data(), host.size() * sizeof(float));
    exec->allreduce(0, {DeviceTensor{buf.get(), buf.get(), host.size()}}, DataType::kFloat32,
                    ReduceOp::kAverage, 2.0, 0.25);
    exec->synchronize(0);
    std::vector<float> got(host.size());
    buf.download(got.data());
    for (float v : got) ASSERT_EQ(v, 1.5f);
  });
#endif
}

TEST(GpuExecutor, ReducescatterWithScales) {
  KOLO_REQUIRE_GPU();
  for (const char* backend : {"gloo", KOLO_WITH_NCCL ? "nccl" : "gloo"}) {
    const int n = std::string(backend) == "nccl" ? 1 : 2;
    runWithArgs(n, [&](int rank, const comm::BackendArgs& args) {
      auto exec = makeExecutor(backend, args);
      std::vector<size_t> counts(n);
      for (int r = 0; r < n; ++r) counts[r] = 1000 + r;  // uneven
      size_t total = 0;
      for (size_t c : counts) total += c;
      std::vector<double> host(total, 1.0 + rank);
      DeviceBytes in(host.data(), total * sizeof(double));
      DeviceBytes out(counts[rank] * sizeof(double));
      exec->reducescatter(0, in.get(), out.get(), counts, DataType::kFloat64, ReduceOp::kAverage,
                          2.0, 3.0);
      exec->synchronize(0);
      std::vector<double> got(counts[rank]);
      out.download(got.data());
      double expect = 0;
      for (int r = 0; r < n; ++r) expect += 2.0 * (1.0 + r);
      expect = expect / n * 3.0;
      for (double v : got) ASSERT_DOUBLE_EQ(v, expect) << backend;
    });
  }
}

#if KOLO_WITH_NCCL
// Rank 1 never joins: rank 0's communicator setup must fail with Timeout
// within the configured timeout, not hang.
TEST(GpuNccl, MissingPeerIsTimeout) {
  KOLO_REQUIRE_GPU();
  Config config = commConfig();
  config.timeout = std::chrono::seconds(3);
  Identity id;
  id.size = 2;
  auto store = makeHashStore();
  comm::BackendArgs args{config, id, store, ""};
  auto devices = std::make_shared<comm::cuda::DeviceSet>();
  auto nccl = comm::createGpuCollectives("nccl", args, devices);
  DeviceBytes buf(64);
  const auto start = std::chrono::steady_clock::now();
  try {
    nccl->allreduce(buf.get(), 16, DataType::kFloat32, ReduceOp::kSum);
    FAIL() << "allreduce without a peer returned";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("nccl"), std::string::npos) << e.what();
  } catch (const PeerFailure& e) {
    // NCCL may detect the missing peer itself (bootstrap error) first.
    EXPECT_NE(std::string(e.what()).find("nccl"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  // The backend stays failed.
  EXPECT_ANY_THROW(nccl->allreduce(buf.get(), 16, DataType::kFloat32, ReduceOp::kSum));
}
#endif

}  // namespace
}  // namespace kolo::test
