// kolo::torch on CUDA tensors: the tensor collectives against the same
// calls on CPU tensors, and DistributedOptimizer training on the GPU (also
// on a non-default stream) against plain LibTorch. Ranks as threads: NCCL
// at size 1 (NCCL refuses two ranks on one GPU), gloo staging at size 2.
// Without a CUDA device (or a CUDA LibTorch) every test skips saying so;
// scripts/gpu-check runs them on a GPU machine.
#include <gtest/gtest.h>

#include <kolo/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "compat.h"
#include "harness/harness.h"

namespace {

namespace kt = kolo::torch;
using kolo::test::spawn;

#define KOLO_REQUIRE_CUDA_TORCH()                                                            \
  do {                                                                                       \
    if (!KOLO_TORCH_WITH_CUDA || !torch::cuda::is_available()) {                             \
      GTEST_SKIP() << "no CUDA device: GPU tests run on a GPU machine via scripts/gpu-check"; \
    }                                                                                        \
  } while (0)

kolo::Config planeConfig(const char* ops) {
  kolo::Config c = kolo::test::testConfig();
  c.gpuOperations = ops;
  c.timeout = std::chrono::seconds(30);
  return c;
}

struct Plane {
  const char* ops;
  int size;
};

class TorchCuda : public ::testing::TestWithParam<Plane> {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

at::Tensor rankTensor(int rank, std::vector<int64_t> shape, at::ScalarType dtype) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return (torch::arange(n).reshape(shape) % 7 + rank).to(dtype);
}

TEST_P(TorchCuda, CollectivesMatchTheCpu) {
  KOLO_REQUIRE_CUDA_TORCH();
  const Plane p = GetParam();
  spawn(p.size, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    const torch::Device gpu(torch::kCUDA, 0);
    for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kInt, at::kLong,
                       at::kByte, at::kChar}) {
      const std::string d = c10::toString(dtype);
      at::Tensor t = rankTensor(rank, {2 * p.size + 1, 3}, dtype);
      at::Tensor g = t.to(gpu);
      auto same = [&](const at::Tensor& cpu, const at::Tensor& cuda, const std::string& what) {
        ASSERT_TRUE(cuda.is_cuda()) << what;
        EXPECT_TRUE(torch::allclose(cpu.to(at::kDouble), cuda.cpu().to(at::kDouble), 1e-2, 1e-2))
            << what << " " << d;
      };
      same(ctx.allreduce(t, kt::Sum, "ar." + d), ctx.allreduce(g, kt::Sum, "ar.g." + d),
           "allreduce");
      same(ctx.allreduce(t, kt::Max, "mx." + d), ctx.allreduce(g, kt::Max, "mx.g." + d), "max");
      same(ctx.broadcast(t, p.size - 1, "bc." + d), ctx.broadcast(g, p.size - 1, "bc.g." + d),
           "broadcast");
      at::Tensor rows = rankTensor(rank, {rank + 1, 3}, dtype);
      same(ctx.allgather(rows, "ag." + d), ctx.allgather(rows.to(gpu), "ag.g." + d),
           "allgather");
      at::Tensor even = rankTensor(rank, {2 * p.size, 3}, dtype);
      same(ctx.alltoall(even, {}, "a2a." + d).tensor,
           ctx.alltoall(even.to(gpu), {}, "a2a.g." + d).tensor, "alltoall");
      same(ctx.reducescatter(t, kt::Sum, "rs." + d), ctx.reducescatter(g, kt::Sum, "rs.g." + d),
           "reducescatter");
      // In place, on a non-contiguous CUDA view.
      at::Tensor view = g.clone().t();
      ctx.allreduce_(view, kt::Sum, "ip." + d);
      same(ctx.allreduce(t, kt::Sum, "ip.c." + d).t(), view, "allreduce_ (view)");
    }
  }, planeConfig(p.ops), std::chrono::seconds(180));
}

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 1));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

std::vector<at::Tensor> snapshot(Net& net) {
  std::vector<at::Tensor> out;
  for (const auto& q : net.parameters()) out.push_back(q.detach().cpu().clone());
  return out;
}

constexpr int kSteps = 6;
constexpr int64_t kBatch = 8;  // rows per rank

// Made before any rank thread starts: LibTorch's generator is global, and
// ranks as threads would interleave their draws.
struct TrainData {
  std::vector<at::Tensor> init;  // initial parameters (CPU)
  std::vector<at::Tensor> x, y;  // per step, ranks * kBatch rows (CPU)
};

TrainData makeTrainData(int ranks) {
  TrainData s;
  torch::manual_seed(3);
  Net net;
  for (const auto& q : net.parameters()) s.init.push_back(q.detach().clone());
  torch::manual_seed(11);
  for (int i = 0; i < kSteps; ++i) {
    s.x.push_back(torch::randn({ranks * kBatch, 8}));
    s.y.push_back(torch::randn({ranks * kBatch, 1}));
  }
  return s;
}

std::shared_ptr<Net> cudaNet(const TrainData& s) {
  auto net = std::make_shared<Net>();
  net->to(torch::kCUDA);
  torch::NoGradGuard noGrad;
  auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(s.init[i]);
  return net;
}

// Plain LibTorch on CUDA: the whole batch each step.
std::vector<at::Tensor> trainPlain(const TrainData& s) {
  auto net = cudaNet(s);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int i = 0; i < kSteps; ++i) {
    opt.zero_grad();
    torch::mse_loss(net->forward(s.x[i].cuda()), s.y[i].cuda()).backward();
    opt.step();
  }
  return snapshot(*net);
}

// Each rank its slice, through DistributedOptimizer; sideStream: the
// training runs on a non-default stream of the caller's choosing.
std::vector<std::vector<at::Tensor>> trainKolo(const Plane& p, const TrainData& setup,
                                               bool sideStream) {
  std::vector<std::vector<at::Tensor>> finals(p.size);
  spawn(p.size, [&](int rank, kolo::Engine& engine) {
#if KOLO_TORCH_WITH_CUDA
    std::optional<c10::cuda::CUDAStreamGuard> guard;
    if (sideStream) guard.emplace(c10::cuda::getStreamFromPool(false, 0));
#endif
    kt::Context ctx(engine);
    auto net = cudaNet(setup);
    auto inner = std::make_shared<torch::optim::SGD>(net->parameters(),
                                                     torch::optim::SGDOptions(0.05).momentum(0.9));
    kt::DistributedOptimizer opt(inner, net->named_parameters(), {}, ctx);
    for (int i = 0; i < kSteps; ++i) {
      at::Tensor x = setup.x[i].narrow(0, rank * kBatch, kBatch).cuda();
      at::Tensor y = setup.y[i].narrow(0, rank * kBatch, kBatch).cuda();
      opt.zero_grad();
      torch::mse_loss(net->forward(x), y).backward();
      opt.step();
    }
    finals[rank] = snapshot(*net);
  }, planeConfig(p.ops), std::chrono::seconds(120));
  return finals;
}

TEST_P(TorchCuda, DistributedOptimizerTrainsAsPlainLibTorch) {
  KOLO_REQUIRE_CUDA_TORCH();
  const Plane p = GetParam();
  const TrainData setup = makeTrainData(p.size);
  const auto plain = trainPlain(setup);
  for (bool sideStream : {false, true}) {
    const auto finals = trainKolo(p, setup, sideStream);
    for (int r = 0; r < p.size; ++r) {
      for (size_t i = 0; i < plain.size(); ++i) {
        EXPECT_TRUE(torch::equal(finals[r][i], finals[0][i])) << "rank " << r << " param " << i;
        if (p.size == 1) {
          // One rank: the averaged gradient is the gradient, bit for bit.
          EXPECT_TRUE(torch::equal(finals[r][i], plain[i]))
              << "side stream " << sideStream << " param " << i << " differs by "
              << (finals[r][i] - plain[i]).abs().max().item<double>();
        } else {
          EXPECT_LE((finals[r][i] - plain[i]).abs().max().item<double>(), 1e-5)
              << "side stream " << sideStream << " rank " << r << " param " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Planes, TorchCuda,
                         ::testing::Values(Plane{"nccl", 1}, Plane{"gloo", 2}),
                         [](const ::testing::TestParamInfo<Plane>& info) {
                           return std::string(info.param.ops) + "_np" +
                                  std::to_string(info.param.size);
                         });

}  // namespace
