// Mixed precision and gradient clipping through kolo::torch::DistributedOptimizer,
// ranks as threads, against the same steps in plain LibTorch (no kolo) on
// the test thread:
// - at size 1 the parameters, gradients and norms are bitwise identical;
// - at size N, without autocast the reference trains on the concatenated
//   N x batch; under autocast it computes each rank's gradient on that
//   rank's slice and averages them (a bf16/fp16 gradient over N x batch
//   rows rounds differently from N gradients over batch rows). Unscaling,
//   the overflow check and clipping act on the averaged gradient in both
//   (synchronize(), then skip_synchronize() around step()).
// LibTorch has no GradScaler: the fp16 test scales the loss by hand, as a
// C++ training loop does (backs off on overflow and skips that step).
// Parametrized by device and world size: CUDA at size 1 over NCCL and at
// size 2 over gloo staging (NCCL refuses two ranks on one GPU); without a
// CUDA device those skip saying so.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <kolo/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "compat.h"
#include "harness/harness.h"

namespace {

namespace kt = kolo::torch;
using kolo::test::spawn;

constexpr int64_t kIn = 8;
constexpr int64_t kHidden = 16;
constexpr int64_t kOut = 4;
constexpr int64_t kRows = 6;  // per rank and step
constexpr double kClip = 0.5;

// Autocast on the calling thread for device, as Python's torch.autocast:
// LibTorch keeps the autocast state per thread. The cast weights cached
// while it is active are dropped when the outermost guard ends (they would
// be stale after the next step).
class AutocastGuard {
 public:
  AutocastGuard(at::DeviceType device, at::ScalarType dtype) : device_(device) {
    wasEnabled_ = enabled(device_);
    wasDtype_ = getDtype(device_);
    setEnabled(device_, true);
    setDtype(device_, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    setEnabled(device_, wasEnabled_);
    setDtype(device_, wasDtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
#if KOLO_TORCH_VERSION_AT_LEAST(2, 4)
  static bool enabled(at::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
  static void setEnabled(at::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
  static at::ScalarType getDtype(at::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
  static void setDtype(at::DeviceType d, at::ScalarType t) {
    at::autocast::set_autocast_dtype(d, t);
  }
#else  // one function per device type
  static bool enabled(at::DeviceType d) {
    return d == at::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
  }
  static void setEnabled(at::DeviceType d, bool on) {
    d == at::kCPU ? at::autocast::set_cpu_enabled(on) : at::autocast::set_enabled(on);
  }
  static at::ScalarType getDtype(at::DeviceType d) {
    return d == at::kCPU ? at::autocast::get_autocast_cpu_dtype()
                         : at::autocast::get_autocast_gpu_dtype();
  }
  static void setDtype(at::DeviceType d, at::ScalarType t) {
    d == at::kCPU ? at::autocast::set_autocast_cpu_dtype(t)
                  : at::autocast::set_autocast_gpu_dtype(t);
  }
#endif
  at::DeviceType device_;
  bool wasEnabled_ = false;
  at::ScalarType wasDtype_ = at::kFloat;
};

struct Net : torch::nn::Module {
  Net() {
    inp = register_module("inp", torch::nn::Linear(kIn, kHidden));
    out = register_module("out", torch::nn::Linear(kHidden, kOut));
  }
  at::Tensor forward(const at::Tensor& x) { return out(torch::tanh(inp(x))); }
  torch::nn::Linear inp{nullptr}, out{nullptr};
};

std::shared_ptr<Net> initialNet() {
  torch::manual_seed(4321);
  return std::make_shared<Net>();
}

void copyParams(const Net& from, Net& to) {
  torch::NoGradGuard noGrad;
  auto src = from.parameters();
  auto dst = to.parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
}

struct Device {
  at::DeviceType type;
  int ranks;
  const char* gpuOps;  // the engine's GPU data plane; nullptr for CPU
};

void PrintTo(const Device& d, std::ostream* os) {
  *os << (d.type == at::kCPU ? "cpu" : "cuda") << ", " << d.ranks << " ranks";
  if (d.gpuOps != nullptr) *os << " over " << d.gpuOps;
}

std::string deviceName(const ::testing::TestParamInfo<Device>& info) {
  const Device& d = info.param;
  if (d.type == at::kCPU) return "cpu_np" + std::to_string(d.ranks);
  return "cuda_np" + std::to_string(d.ranks) + "_" + d.gpuOps;
}

// One training recipe: what autocast (kFloat: none), which optimizer,
// whether the loss is scaled (fp16) and the averaged gradient clipped.
struct Recipe {
  at::ScalarType autocast = at::kFloat;
  bool clip = false;
  double initScale = 0;  // > 0: loss scaling with this initial scale
  int steps = 4;
  std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)> make =
      [](std::vector<at::Tensor> p) {
        return std::make_shared<torch::optim::AdamW>(
            p, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
      };
};

// What a run leaves behind, per step and at the end.
struct Trace {
  std::vector<at::Tensor> grads;  // the averaged, unscaled gradient, flat, per step
  std::vector<double> norms;      // clip_grad_norm_'s total norm per step (clip only)
  std::vector<bool> stepped;      // false: skipped for an overflow
  double scale = 0;
  std::vector<at::Tensor> params;
};

struct Data {
  std::vector<at::Tensor> x, y;  // per step: ranks * kRows rows
};

Data makeData(int steps, int ranks) {
  torch::manual_seed(7);
  Data d;
  for (int s = 0; s < steps; ++s) {
    d.x.push_back(torch::randn({ranks * kRows, kIn}));
    d.y.push_back(torch::randn({ranks * kRows, kOut}));
  }
  return d;
}

// The loss of net on (x, y), forward under recipe's autocast, in fp32.
at::Tensor lossOf(Net& net, const at::Tensor& x, const at::Tensor& y, const Recipe& recipe) {
  at::Tensor out;
  if (recipe.autocast != at::kFloat) {
    AutocastGuard autocast(x.device().type(), recipe.autocast);
    out = net.forward(x);
    EXPECT_EQ(out.scalar_type(), recipe.autocast) << "autocast did not apply";
  } else {
    out = net.forward(x);
  }
  return torch::mse_loss(out.to(at::kFloat), y);
}

at::Tensor flatGrad(Net& net) {
  std::vector<at::Tensor> parts;
  for (auto& p : net.parameters()) parts.push_back(p.grad().detach().reshape({-1}).cpu());
  return torch::cat(parts);
}

// After the averaged (scaled) gradients are in p.grad: unscale, check for
// overflow, clip, then step(), unless a gradient overflowed (the scale then
// backs off and the step is skipped).
void finishStep(Net& net, const Recipe& recipe, double& scale, Trace& trace,
                const std::function<void()>& step) {
  bool finite = true;
  if (recipe.initScale > 0) {
    torch::NoGradGuard noGrad;
    for (auto& p : net.parameters()) {
      p.mutable_grad().mul_(1.0 / scale);
      finite = finite && p.grad().isfinite().all().item<bool>();
    }
  }
  trace.grads.push_back(flatGrad(net));
  if (recipe.clip)
    trace.norms.push_back(torch::nn::utils::clip_grad_norm_(net.parameters(), kClip));
  trace.stepped.push_back(finite);
  if (finite) {
    step();
  } else {
    scale *= 0.5;
  }
}

void scaledBackward(const at::Tensor& loss, const Recipe& recipe, double scale) {
  (recipe.initScale > 0 ? loss * scale : loss).backward();
}

Trace trainReference(const Device& dev, const Recipe& recipe, const Net& init, const Data& data) {
  const torch::Device device(dev.type, 0);
  auto net = std::make_shared<Net>();
  copyParams(init, *net);
  net->to(device);
  auto opt = recipe.make(net->parameters());
  Trace trace;
  double scale = recipe.initScale;
  for (int s = 0; s < recipe.steps; ++s) {
    const at::Tensor x = data.x[s].to(device), y = data.y[s].to(device);
    if (recipe.autocast == at::kFloat) {
      kt::compat::zeroGrad(*opt, /*setToNone=*/true);
      scaledBackward(lossOf(*net, x, y, recipe), recipe, scale);
    } else {
      std::vector<std::vector<at::Tensor>> perRank;
      for (int r = 0; r < dev.ranks; ++r) {
        kt::compat::zeroGrad(*opt, /*setToNone=*/true);
        at::Tensor loss =
            lossOf(*net, x.narrow(0, r * kRows, kRows), y.narrow(0, r * kRows, kRows), recipe);
        scaledBackward(loss, recipe, scale);
        std::vector<at::Tensor> grads;
        for (auto& p : net->parameters()) grads.push_back(p.grad().clone());
        perRank.push_back(grads);
      }
      auto params = net->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        std::vector<at::Tensor> g;
        for (auto& rank : perRank) g.push_back(rank[i]);
        params[i].mutable_grad() = torch::stack(g).sum(0) / dev.ranks;
      }
    }
    finishStep(*net, recipe, scale, trace, [&] { opt->step(); });
  }
  trace.scale = scale;
  for (auto& p : net->parameters()) trace.params.push_back(p.detach().cpu().clone());
  return trace;
}

std::vector<Trace> trainDistributed(const Device& dev, const Recipe& recipe, const Net& init,
                                    const Data& data) {
  std::vector<Trace> traces(dev.ranks);
  kolo::Config config = kolo::test::testConfig();
  if (dev.gpuOps != nullptr) config.gpuOperations = dev.gpuOps;
  spawn(
      dev.ranks,
      [&](int rank, kolo::Engine& engine) {
        kt::Context ctx(engine);
        const torch::Device device(dev.type, 0);
        auto net = std::make_shared<Net>();
        if (rank == 0) copyParams(init, *net);
        net->to(device);
        kt::broadcast_parameters(*net, 0, ctx);
        kt::DistributedOptimizer opt(recipe.make(net->parameters()), net->named_parameters(), {},
                                     ctx);
        Trace& trace = traces[rank];
        double scale = recipe.initScale;
        for (int s = 0; s < recipe.steps; ++s) {
          opt.zero_grad();
          const at::Tensor x = data.x[s].narrow(0, rank * kRows, kRows).to(device);
          const at::Tensor y = data.y[s].narrow(0, rank * kRows, kRows).to(device);
          scaledBackward(lossOf(*net, x, y, recipe), recipe, scale);
          opt.synchronize();
          finishStep(*net, recipe, scale, trace, [&] {
            auto guard = opt.skip_synchronize();
            opt.step();
          });
        }
        trace.scale = scale;
        for (auto& p : net->parameters()) trace.params.push_back(p.detach().cpu().clone());
      },
      config);
  return traces;
}

// Equal at size 1, within 1e-5 relative (1e-6 absolute) at size N; NaN
// matches NaN, infinity the same infinity (overflowing fp16 steps).
void expectMatch(const at::Tensor& got, const at::Tensor& want, int ranks,
                 const std::string& what) {
  const double rtol = ranks == 1 ? 0.0 : 1e-5, atol = ranks == 1 ? 0.0 : 1e-6;
  EXPECT_TRUE(torch::allclose(got, want, rtol, atol, /*equal_nan=*/true))
      << what << ": max diff " << (got - want).abs().max().item<double>() << "\n got  " << got
      << "\n want " << want;
}

class TorchAmp : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    torch::set_num_threads(1);
    if (GetParam().type == at::kCUDA && (!KOLO_TORCH_WITH_CUDA || !torch::cuda::is_available())) {
      GTEST_SKIP() << "no CUDA device: GPU tests run on a GPU machine via scripts/gpu-check";
    }
  }

  // Trains recipe with and without kolo and compares every step; the
  // reference's trace goes to refOut.
  void expectSameTraining(const Recipe& recipe, Trace* refOut = nullptr) {
    const Device dev = GetParam();
    auto init = initialNet();
    const Data data = makeData(recipe.steps, dev.ranks);
    const Trace ref = trainReference(dev, recipe, *init, data);
    if (refOut != nullptr) *refOut = ref;
    const std::vector<Trace> runs = trainDistributed(dev, recipe, *init, data);
    auto start = init->parameters();
    for (int r = 0; r < dev.ranks; ++r) {
      const Trace& run = runs[r];
      const std::string who = "rank " + std::to_string(r);
      ASSERT_EQ(run.grads.size(), ref.grads.size());
      for (size_t s = 0; s < ref.grads.size(); ++s) {
        expectMatch(run.grads[s], ref.grads[s], dev.ranks,
                    who + " gradient at step " + std::to_string(s));
      }
      ASSERT_EQ(run.norms.size(), ref.norms.size());
      for (size_t s = 0; s < ref.norms.size(); ++s) {
        expectMatch(torch::tensor(run.norms[s], at::kDouble),
                    torch::tensor(ref.norms[s], at::kDouble), dev.ranks,
                    who + " gradient norm at step " + std::to_string(s));
      }
      EXPECT_EQ(run.stepped, ref.stepped) << who;
      EXPECT_EQ(run.scale, ref.scale) << who;
      ASSERT_EQ(run.params.size(), ref.params.size());
      for (size_t i = 0; i < ref.params.size(); ++i) {
        EXPECT_TRUE(torch::equal(run.params[i], runs[0].params[i]))
            << who << " parameter " << i << " differs from rank 0";
        expectMatch(run.params[i], ref.params[i], dev.ranks,
                    who + " parameter " + std::to_string(i));
        EXPECT_FALSE(torch::equal(run.params[i], start[i]))
            << "parameter " << i << " did not train";
      }
    }
    if (recipe.clip) {
      // The clip was active on some step that was taken.
      double largest = 0;
      for (size_t s = 0; s < ref.norms.size(); ++s) {
        if (ref.stepped[s]) largest = std::max(largest, ref.norms[s]);
      }
      EXPECT_GT(largest, kClip);
    }
  }
};

TEST_P(TorchAmp, Bf16AutocastAdamW) {
  Recipe recipe;
  recipe.autocast = at::kBFloat16;
  expectSameTraining(recipe);
}

TEST_P(TorchAmp, Bf16AutocastClipsTheAveragedGradient) {
  Recipe recipe;
  recipe.autocast = at::kBFloat16;
  recipe.clip = true;
  expectSameTraining(recipe);
}

TEST_P(TorchAmp, Fp16LossScalingSkipsOverflowingSteps) {
#if !KOLO_TORCH_VERSION_AT_LEAST(2, 3)
  if (GetParam().type == at::kCPU) {
    GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " CPU autocast supports bfloat16 only";
  }
#endif
  Recipe recipe;
  recipe.autocast = at::kHalf;
  recipe.clip = true;
  // Large enough that the first steps' fp16 gradients overflow.
  recipe.initScale = std::ldexp(1.0, 22);
  recipe.steps = 8;
  Trace ref;
  expectSameTraining(recipe, &ref);
  // expectSameTraining compared the skip decisions; there were both kinds.
  const auto taken = std::count(ref.stepped.begin(), ref.stepped.end(), true);
  EXPECT_GT(taken, 0);
  EXPECT_LT(taken, recipe.steps);
  EXPECT_LT(ref.scale, recipe.initScale);
}

TEST_P(TorchAmp, Fp32ClipGradNormMatchesTheConcatenatedBatch) {
  Recipe recipe;
  recipe.clip = true;
  recipe.make = [](std::vector<at::Tensor> p) {
    return std::make_shared<torch::optim::SGD>(p, torch::optim::SGDOptions(0.2).momentum(0.9));
  };
  expectSameTraining(recipe);
}

INSTANTIATE_TEST_SUITE_P(Devices, TorchAmp,
                         ::testing::Values(Device{at::kCPU, 1, nullptr},
                                           Device{at::kCPU, 2, nullptr},
                                           Device{at::kCPU, 3, nullptr},
                                           Device{at::kCUDA, 1, "nccl"},
                                           Device{at::kCUDA, 2, "gloo"}),
                         deviceName);

}  // namespace
