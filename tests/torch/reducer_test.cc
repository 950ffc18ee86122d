// GradientReducer: buckets (one engine request each, stable names, cache
// hits), gradients reduced in place, results against plain LibTorch. Ranks
// as threads.
#include <gtest/gtest.h>

#include <kolo/torch.h>
#include <kolo/torch/reducer.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "compat.h"
#include "harness/harness.h"

namespace {

namespace kt = kolo::torch;
using kolo::test::spawn;

class TorchReducer : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

struct Mlp : torch::nn::Module {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(5, 7));
    fc2 = register_module("fc2", torch::nn::Linear(7, 3));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// Ranks are threads of one process and LibTorch's default generator is
// global: a rank seeds it and draws its initial weights under this lock, so
// that every rank starts from the same weights.
std::mutex& generatorLock() {
  static std::mutex m;
  return m;
}

// An Mlp with the initial weights seed gives: the same on every rank.
std::shared_ptr<Mlp> seededMlp(uint64_t seed) {
  std::lock_guard<std::mutex> seeded(generatorLock());
  torch::manual_seed(seed);
  return std::make_shared<Mlp>();
}

// A seeded Mlp and a second one with the same weights (both drawn under
// the lock: another rank's seeding must not fall between).
std::pair<std::shared_ptr<Mlp>, std::shared_ptr<Mlp>> seededTwins(uint64_t seed) {
  std::lock_guard<std::mutex> seeded(generatorLock());
  torch::manual_seed(seed);
  auto net = std::make_shared<Mlp>();
  auto twin = std::make_shared<Mlp>();
  torch::NoGradGuard noGrad;
  auto src = net->parameters();
  auto dst = twin->parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  return {net, twin};
}

at::Tensor input(int rank, int step) {
  return torch::arange(20, torch::kDouble).reshape({4, 5}) * 0.01 * (rank + 1) + 0.1 * step;
}

// The average over ranks of each rank's plain LibTorch gradients.
std::vector<at::Tensor> referenceGrads(const Mlp& init, int ranks, int step) {
  std::vector<at::Tensor> sum;
  for (int r = 0; r < ranks; ++r) {
    auto net = std::make_shared<Mlp>();
    net->to(torch::kDouble);
    {
      torch::NoGradGuard noGrad;
      auto src = init.parameters();
      auto dst = net->parameters();
      for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
    }
    net->forward(input(r, step)).pow(2).sum().backward();
    auto ps = net->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      if (r == 0) {
        sum.push_back(ps[i].grad().clone());
      } else {
        sum[i] += ps[i].grad();
      }
    }
  }
  for (auto& g : sum) g /= ranks;
  return sum;
}

// Every gradient of a small model in one bucket: one request per step, named
// by its first member (backward order), the same on every step; the engine's
// response cache answers from the second step on. The gradients are reduced
// in place (param.grad() keeps its memory from one step to the next) and
// equal the average of plain LibTorch gradients: bitwise on one rank.
TEST_F(TorchReducer, OneRequestPerBucketInPlace) {
  for (int ranks : {1, 2, 3}) {
    torch::manual_seed(11);
    auto init = std::make_shared<Mlp>();
    init->to(torch::kDouble);
    spawn(ranks, [&](int rank, kolo::Engine& engine) {
      kt::Context ctx(engine);
      auto net = std::make_shared<Mlp>();
      net->to(torch::kDouble);
      {
        torch::NoGradGuard noGrad;
        auto src = init->parameters();
        auto dst = net->parameters();
        for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
      }
      kt::GradientReducer reducer(kt::to_named_tensors(net->named_parameters()), {}, ctx);
      // Only zero_grad: LibTorch's detach_()es each gradient, which an
      // autograd view of the bucket would refuse.
      torch::optim::SGD zeroer(net->parameters(), torch::optim::SGDOptions(0.0));
      const auto buckets = reducer.buckets();
      ASSERT_EQ(buckets.size(), 1u);
      EXPECT_EQ(buckets[0], (std::vector<std::string>{"fc2.bias", "fc2.weight", "fc1.bias",
                                                      "fc1.weight"}));
      std::vector<const void*> where;
      const kolo::EngineStats before = engine.stats();
      for (int step = 0; step < 3; ++step) {
        kolo::torch::compat::zeroGrad(zeroer, /*setToNone=*/false);
        net->forward(input(rank, step)).pow(2).sum().backward();
        EXPECT_EQ(reducer.submitted(), 4) << "the hook did not submit the bucket";
        std::vector<const void*> now;
        for (auto& p : net->parameters()) now.push_back(p.grad().data_ptr());
        reducer.synchronize();
        auto ps = net->parameters();
        auto ref = referenceGrads(*init, ranks, step);
        for (size_t i = 0; i < ps.size(); ++i) {
          EXPECT_EQ(ps[i].grad().data_ptr(), now[i]) << "reduced out of place, param " << i;
          if (ranks == 1) {
            EXPECT_TRUE(torch::equal(ps[i].grad(), ref[i])) << "param " << i;
          } else {
            EXPECT_TRUE(torch::allclose(ps[i].grad(), ref[i], 1e-12, 1e-14)) << "param " << i;
          }
        }
        // From the second backward on, gradients accumulate in the bucket.
        if (step > 0) EXPECT_EQ(now, where);
        where = now;  // the parameters stay: each step's reference starts from init
      }
      EXPECT_EQ(reducer.requests(), 3u);
      const kolo::EngineStats after = engine.stats();
      EXPECT_EQ(after.responses - before.responses, 3u);
      if (ranks > 1) EXPECT_GE(after.cachedResponses - before.cachedResponses, 2u);
    });
  }
}

// bucket_bytes caps buckets (a parameter larger than the cap goes alone);
// explicit groups are buckets of their own, in the order given; compressed
// gradients travel as float16 and are written back as float32.
TEST_F(TorchReducer, BucketLayoutGroupsAndCompression) {
  spawn(2, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    auto [net, plain] = seededTwins(5);  // fc1: 35 + 7 floats, fc2: 21 + 3
    const at::Tensor x = torch::ones({2, 5});
    // This rank's loss is (rank + 1) times the same function: the average
    // gradient is (ranks + 1) / 2 times plain's.
    plain->forward(x).sum().backward();
    {
      kt::GradientReducerOptions o;
      o.bucket_bytes = 100;  // 25 floats
      kt::GradientReducer capped(kt::to_named_tensors(net->named_parameters()), o, ctx);
      EXPECT_EQ(capped.buckets(), (std::vector<std::vector<std::string>>{
                                      {"fc2.bias", "fc2.weight"}, {"fc1.bias"}, {"fc1.weight"}}));
      (net->forward(x).sum() * (rank + 1)).backward();
      EXPECT_EQ(capped.requests(), 3u);
      capped.synchronize();
      auto ps = net->parameters(), qs = plain->parameters();
      for (size_t i = 0; i < ps.size(); ++i) {
        EXPECT_TRUE(torch::allclose(ps[i].grad(), qs[i].grad() * 1.5)) << i;
      }
    }
    kt::GradientReducerOptions g;
    g.groups = {{0, 3}};  // fc1.weight with fc2.bias
    g.compression = kt::Compression::kFP16;
    kt::GradientReducer grouped(kt::to_named_tensors(net->named_parameters()), g, ctx);
    EXPECT_EQ(grouped.buckets(), (std::vector<std::vector<std::string>>{
                                     {"fc1.weight", "fc2.bias"}, {"fc2.weight", "fc1.bias"}}));
    for (auto& p : net->parameters()) p.mutable_grad().reset();  // set_to_none
    (net->forward(x).sum() * (rank + 1)).backward();
    grouped.synchronize();
    EXPECT_EQ(grouped.requests(), 2u);
    auto ps = net->parameters(), qs = plain->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_EQ(ps[i].grad().scalar_type(), torch::kFloat);
      EXPECT_TRUE(torch::allclose(ps[i].grad(), qs[i].grad() * 1.5, 2e-3, 2e-3)) << i;
    }
  });
}

// A compressor kolo does not implement (compress, decompress): each
// parameter travels alone, and a group as one grouped request, as what
// compress made of it (here float64, scaled by 4), and comes back through
// decompress; a gradient set to none is compressed as zeros. Each is called
// once per parameter and step, with the parameter's index. Bad
// combinations and a bad compressor are refused, naming what was wrong.
TEST_F(TorchReducer, ACompressorKoloDoesNotKnowCarriesEachParameterAndGroup) {
  spawn(2, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    auto [net, plain] = seededTwins(5);
    const at::Tensor x = torch::ones({2, 5});
    plain->forward(x).sum().backward();
    std::vector<size_t> compressed, decompressed;
    kt::GradientReducerOptions o;
    o.groups = {{0, 3}};  // fc1.weight with fc2.bias
    o.compress = [&](size_t i, const at::Tensor& grad) {
      compressed.push_back(i);
      return grad.to(torch::kDouble) * 4;
    };
    o.decompress = [&](size_t i, const at::Tensor& reduced) {
      decompressed.push_back(i);
      EXPECT_EQ(reduced.scalar_type(), torch::kDouble);
      return (reduced / 4).to(torch::kFloat);
    };
    kt::GradientReducer reducer(kt::to_named_tensors(net->named_parameters()), o, ctx);
    EXPECT_EQ(reducer.buckets(), (std::vector<std::vector<std::string>>{
                                     {"fc1.weight", "fc2.bias"}, {"fc2.weight"}, {"fc1.bias"}}));
    for (int step = 0; step < 2; ++step) {
      for (auto& p : net->parameters()) p.mutable_grad().reset();  // set_to_none
      // Rank 1's second backward does not reach fc2's parameters (the same
      // values, detached: fc1's gradients stay): zeros travel for them.
      const bool skip = step == 1 && rank == 1;
      at::Tensor h = torch::tanh(net->fc1(x));
      at::Tensor y = skip ? torch::nn::functional::linear(h, net->fc2->weight.detach(),
                                                          net->fc2->bias.detach())
                          : net->fc2(h);
      (y.sum() * (rank + 1)).backward();
      reducer.synchronize();
      EXPECT_EQ(reducer.requests(), 3u * (step + 1));
      auto ps = net->parameters(), qs = plain->parameters();
      for (size_t i = 0; i < ps.size(); ++i) {
        // fc2 (2, 3) on the second step: rank 0's alone, averaged with zeros.
        const double factor = step == 1 && i >= 2 ? 0.5 : 1.5;
        EXPECT_EQ(ps[i].grad().scalar_type(), torch::kFloat);
        EXPECT_TRUE(torch::allclose(ps[i].grad(), qs[i].grad() * factor)) << step << " " << i;
      }
      std::sort(compressed.begin(), compressed.end());
      std::sort(decompressed.begin(), decompressed.end());
      EXPECT_EQ(compressed, (std::vector<size_t>{0, 1, 2, 3})) << step;
      EXPECT_EQ(decompressed, compressed) << step;
      compressed.clear();
      decompressed.clear();
    }
  });
  spawn(1, [&](int, kolo::Engine& engine) {
    kt::Context ctx(engine);
    auto net = seededMlp(3);
    auto named = kt::to_named_tensors(net->named_parameters());
    auto message = [&](const kt::GradientReducerOptions& o) -> std::string {
      try {
        kt::GradientReducer reducer(named, o, ctx);
        net->forward(torch::ones({2, 5})).sum().backward();
        reducer.synchronize();
      } catch (const kolo::InvalidArgument& e) {
        return e.what();
      }
      return "(nothing thrown)";
    };
    kt::GradientReducerOptions half;
    half.compress = [](size_t, const at::Tensor& g) { return g; };
    EXPECT_NE(message(half).find("both compress and decompress"), std::string::npos)
        << message(half);
    kt::GradientReducerOptions both = half;
    both.decompress = half.compress;
    both.compression = kt::Compression::kFP16;
    EXPECT_NE(message(both).find("leave it none"), std::string::npos) << message(both);
    kt::GradientReducerOptions undefined = both;
    undefined.compression = kt::Compression::kNone;
    undefined.compress = [](size_t, const at::Tensor&) { return at::Tensor(); };
    const std::string refused = message(undefined);
    EXPECT_NE(refused.find("compress() gave an undefined tensor for parameter 'fc"),
              std::string::npos)
        << refused;
  });
}

// A parameter that backward never reaches on some rank contributes zeros;
// gradients with set_to_none are copied into the bucket and become its
// views.
TEST_F(TorchReducer, UnusedParametersAndSetToNone) {
  spawn(2, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    auto net = seededMlp(5);
    kt::GradientReducer reducer(kt::to_named_tensors(net->named_parameters()), {}, ctx);
    for (int step = 0; step < 2; ++step) {
      for (auto& p : net->parameters()) p.mutable_grad().reset();
      // Rank 1 skips fc2: its bucket waits for synchronize().
      at::Tensor h = torch::tanh(net->fc1(torch::ones({2, 5})));
      at::Tensor loss = rank == 0 ? net->fc2(h).sum() : h.sum();
      loss.backward();
      EXPECT_EQ(reducer.submitted(), rank == 0 ? 4 : 0);
      reducer.synchronize();
      EXPECT_TRUE(net->fc2->bias.grad().defined());
      // fc2.bias's gradient: rank 0's ones(3)*2 averaged with rank 1's zeros.
      EXPECT_TRUE(torch::equal(net->fc2->bias.grad(), torch::ones({3})));
    }
  });
}

// A failure of the engine (here a peer that aborted) that a hook meets
// when it submits a bucket is not thrown through backward(), where autograd
// would wrap it in a c10::Error and lose its kind (elastic training
// recovers from kolo's PeerFailure, raised by step()): synchronize() raises
// it, as kolo's own error, and the reducer is ready for the next step.
TEST_F(TorchReducer, AFailureInAHookIsRaisedBySynchronizeNotByBackward) {
  spawn(2, [&](int rank, kolo::Engine& engine) {
    if (rank == 1) {
      engine.abort("rank 1 gave up (simulated)");
      return;
    }
    kt::Context ctx(engine);
    auto net = seededMlp(7);
    kt::GradientReducer reducer(kt::to_named_tensors(net->named_parameters()), {}, ctx);
    // Until this rank's engine knows: an operation that fails with it.
    std::vector<float> v(1, 1.0f);
    kolo::Request probe;
    probe.name = "probe";
    probe.op = kolo::OpType::kAllreduce;
    probe.dtype = kolo::DataType::kFloat32;
    probe.shape = {1};
    EXPECT_THROW(engine.enqueue(probe, kolo::Entry{v.data(), v.data(), {}, {}}).wait(),
                 kolo::PeerFailure);
    EXPECT_NO_THROW(net->forward(torch::ones({2, 5})).sum().backward());
    try {
      reducer.synchronize();
      ADD_FAILURE() << "synchronize() did not raise the engine's failure";
    } catch (const kolo::PeerFailure& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 gave up (simulated)"), std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(reducer.pending());
  });
}

}  // namespace
