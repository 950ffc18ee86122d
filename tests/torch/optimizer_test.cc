// DistributedOptimizer and optimizer-state broadcast, ranks as threads.
//
// Equivalence tests compare N ranks with per-rank batch B against plain
// LibTorch (no kolo) on one batch of N*B rows from the same initial model.
#include <gtest/gtest.h>

#include <kolo/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "compat.h"
#include "harness/harness.h"

namespace {

namespace kt = kolo::torch;
using kolo::test::spawn;

class TorchOptimizer : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

constexpr int64_t kIn = 6;

struct Net : torch::nn::Module {
  explicit Net(bool extras = false) {
    fc1 = register_module("fc1", torch::nn::Linear(kIn, 12));
    fc2 = register_module("fc2", torch::nn::Linear(12, 12));
    fc3 = register_module("fc3", torch::nn::Linear(12, 1));
    if (extras) {
      unused = register_module("unused", torch::nn::Linear(12, 12));
      branch = register_module("branch", torch::nn::Linear(12, 1));
    }
  }
  // useBranch: the "branch" layer takes part (conditional computation).
  at::Tensor forward(const at::Tensor& x, bool useBranch = false,
                     const std::function<void(const at::Tensor&)>& probe = nullptr) {
    at::Tensor h1 = torch::tanh(fc1(x));
    if (probe) probe(h1);
    at::Tensor h2 = torch::tanh(fc2(h1));
    at::Tensor out = fc3(h2);
    if (useBranch) out = out + branch(h2);
    return out;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, unused{nullptr}, branch{nullptr};
};

void copyParams(const Net& from, Net& to) {
  torch::NoGradGuard noGrad;
  auto src = from.parameters();
  auto dst = to.parameters();
  ASSERT_EQ(src.size(), dst.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
}

std::vector<at::Tensor> snapshot(const Net& net) {
  std::vector<at::Tensor> out;
  for (const auto& p : net.parameters()) out.push_back(p.detach().clone());
  return out;
}

using OptimizerFactory =
    std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;

OptimizerFactory sgd() {
  return [](std::vector<at::Tensor> p) {
    return std::make_shared<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9));
  };
}
OptimizerFactory adam() {
  return [](std::vector<at::Tensor> p) {
    return std::make_shared<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01));
  };
}

struct Data {
  std::vector<at::Tensor> x, y;  // one full batch per step
};

Data makeData(int steps, int64_t rows) {
  torch::manual_seed(7);
  Data d;
  for (int s = 0; s < steps; ++s) {
    d.x.push_back(torch::randn({rows, kIn}));
    d.y.push_back(torch::randn({rows, 1}));
  }
  return d;
}

std::shared_ptr<Net> initialNet(bool extras = false) {
  torch::manual_seed(3);
  return std::make_shared<Net>(extras);
}

struct TrainSpec {
  int ranks = 2;
  int steps = 4;
  int passes = 1;         // micro-batches per step (backward_passes_per_step)
  int64_t batch = 4;      // rows per micro-batch per rank
  at::ScalarType dtype = at::kFloat;
  OptimizerFactory make = sgd();
  kt::DistributedOptimizerOptions options;
  bool clip = false;      // clip the averaged gradients before stepping
};

void clip(Net& net) { torch::nn::utils::clip_grad_norm_(net.parameters(), 0.05); }

// Plain LibTorch on the whole batch of every step.
std::vector<at::Tensor> trainReference(const TrainSpec& run, const Net& init, const Data& data) {
  auto net = std::make_shared<Net>();
  net->to(run.dtype);
  copyParams(init, *net);
  auto opt = run.make(net->parameters());
  for (int s = 0; s < run.steps; ++s) {
    opt->zero_grad();
    auto loss = torch::mse_loss(net->forward(data.x[s].to(run.dtype)), data.y[s].to(run.dtype));
    loss.backward();
    if (run.clip) clip(*net);
    opt->step();
  }
  return snapshot(*net);
}

// Each rank takes its slice of every step's batch; rank 0 starts from init,
// the others from their own random weights until broadcast_parameters.
std::vector<std::vector<at::Tensor>> trainDistributed(const TrainSpec& run, const Net& init,
                                                      const Data& data) {
  std::vector<std::vector<at::Tensor>> finals(run.ranks);
  spawn(run.ranks, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    auto net = std::make_shared<Net>();
    net->to(run.dtype);
    if (rank == 0) copyParams(init, *net);
    kt::broadcast_parameters(*net, 0, ctx);
    auto inner = run.make(net->parameters());
    kt::DistributedOptimizerOptions options = run.options;
    options.backward_passes_per_step = run.passes;
    kt::DistributedOptimizer opt(inner, net->named_parameters(), options, ctx);
    const int64_t rows = run.passes * run.batch;
    for (int s = 0; s < run.steps; ++s) {
      opt.zero_grad();
      for (int p = 0; p < run.passes; ++p) {
        const int64_t begin = rank * rows + p * run.batch;
        at::Tensor x = data.x[s].narrow(0, begin, run.batch).to(run.dtype);
        at::Tensor y = data.y[s].narrow(0, begin, run.batch).to(run.dtype);
        auto loss = torch::mse_loss(net->forward(x), y) / run.passes;
        loss.backward();
      }
      if (run.clip) {
        opt.synchronize();
        clip(*net);
        auto guard = opt.skip_synchronize();
        opt.step();
      } else {
        opt.step();
      }
    }
    finals[rank] = snapshot(*net);
  });
  return finals;
}

// Parameters bitwise identical on every rank and within tol of the reference.
void expectEquivalent(const TrainSpec& run, double tol) {
  auto init = initialNet();
  Data data = makeData(run.steps, run.ranks * run.passes * run.batch);
  auto reference = trainReference(run, *init, data);
  auto finals = trainDistributed(run, *init, data);
  for (int r = 0; r < run.ranks; ++r) {
    ASSERT_EQ(finals[r].size(), reference.size());
    for (size_t i = 0; i < reference.size(); ++i) {
      EXPECT_TRUE(torch::equal(finals[r][i], finals[0][i]))
          << "rank " << r << " parameter " << i << " differs from rank 0";
      double diff = (finals[r][i] - reference[i]).abs().max().item<double>();
      EXPECT_LE(diff, tol) << "rank " << r << " parameter " << i;
    }
  }
  // Training moved the parameters at all.
  EXPECT_FALSE(torch::allclose(reference[0], init->parameters()[0].to(run.dtype)));
}

TEST_F(TorchOptimizer, SgdOnTwoRanksEqualsDoubleBatch) {
  TrainSpec run;
  run.ranks = 2;
  expectEquivalent(run, 1e-5);
}

TEST_F(TorchOptimizer, AdamOnThreeRanksEqualsTripleBatch) {
  TrainSpec run;
  run.ranks = 3;
  run.make = adam();
  run.dtype = at::kDouble;
  expectEquivalent(run, 1e-8);
}

TEST_F(TorchOptimizer, AdamWRmspropAdagradOnFourRanks) {
  std::vector<OptimizerFactory> makers = {
      [](std::vector<at::Tensor> p) {
        return std::make_shared<torch::optim::AdamW>(p, torch::optim::AdamWOptions(0.01));
      },
      [](std::vector<at::Tensor> p) {
        return std::make_shared<torch::optim::RMSprop>(p, torch::optim::RMSpropOptions(0.01));
      },
      [](std::vector<at::Tensor> p) {
        return std::make_shared<torch::optim::Adagrad>(p, torch::optim::AdagradOptions(0.05));
      }};
  for (auto& make : makers) {
    TrainSpec run;
    run.ranks = 4;
    run.batch = 2;
    run.steps = 3;
    run.make = make;
    run.dtype = at::kDouble;
    expectEquivalent(run, 1e-8);
  }
}

TEST_F(TorchOptimizer, BackwardPassesPerStepEqualsBatchDoubling) {
  TrainSpec run;
  run.ranks = 2;
  run.passes = 2;
  run.make = adam();
  run.dtype = at::kDouble;
  expectEquivalent(run, 1e-8);
}

TEST_F(TorchOptimizer, GroupsAndPredivideGiveTheSameResult) {
  TrainSpec run;
  run.ranks = 2;
  run.options.num_groups = 2;
  expectEquivalent(run, 1e-5);
  TrainSpec named;
  named.ranks = 3;
  named.options.groups = {{"fc1.weight", "fc3.bias"}, {"fc2.weight", "fc2.bias"}};
  named.options.gradient_predivide_factor = 3.0;
  expectEquivalent(named, 1e-5);
}

TEST_F(TorchOptimizer, SumOpOnOneRankIsPlainTraining) {
  TrainSpec run;
  run.ranks = 1;
  run.options.op = kt::Sum;
  expectEquivalent(run, 0.0);
}

TEST_F(TorchOptimizer, Fp16AndBf16CompressionStayWithinTolerance) {
  TrainSpec run;
  run.ranks = 2;
  run.options.compression = kt::Compression::kFP16;
  expectEquivalent(run, 2e-3);
  run.options.compression = kt::Compression::kBF16;
  expectEquivalent(run, 2e-2);
}

TEST_F(TorchOptimizer, SkipSynchronizeAllowsClipThenStep) {
  TrainSpec run;
  run.ranks = 2;
  run.clip = true;
  expectEquivalent(run, 1e-5);
}

TEST_F(TorchOptimizer, UnusedAndPartlyUsedParametersDoNotHang) {
  const int n = 3;
  auto init = initialNet(/*extras=*/true);
  std::vector<std::vector<at::Tensor>> finals(n);
  std::vector<at::Tensor> unusedGrad(n);
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    auto net = std::make_shared<Net>(true);
    if (rank == 0) copyParams(*init, *net);
    kt::broadcast_parameters(net->named_parameters(), 0, ctx);
    auto inner = std::make_shared<torch::optim::SGD>(net->parameters(),
                                                     torch::optim::SGDOptions(0.1));
    kt::DistributedOptimizer opt(inner, net->named_parameters(), {}, ctx);
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      at::Tensor x = torch::full({2, kIn}, 0.1 * (rank + s));
      // "branch" is used on rank 1 only, "unused" never.
      auto loss = net->forward(x, /*useBranch=*/rank == 1).pow(2).mean();
      loss.backward();
      opt.step();
    }
    finals[rank] = snapshot(*net);
    unusedGrad[rank] = net->unused->weight.grad().clone();
  });
  auto start = init->parameters();
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < finals[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(finals[r][i], finals[0][i])) << "rank " << r << " param " << i;
    }
    EXPECT_TRUE(torch::equal(unusedGrad[r], torch::zeros_like(unusedGrad[r])));
  }
  // Parameter order: fc1 w,b, fc2 w,b, fc3 w,b, unused w,b, branch w,b.
  EXPECT_TRUE(torch::equal(finals[0][6], start[6])) << "unused weight moved";
  EXPECT_FALSE(torch::equal(finals[0][8], start[8])) << "branch weight did not train";
}

TEST_F(TorchOptimizer, HooksEnqueueAllreducesDuringBackward) {
  const int n = 2;
  std::vector<int> seenInBackward(n, -1), afterBackward(n, -1);
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    auto net = std::make_shared<Net>();
    kt::broadcast_parameters(*net, 0, ctx);
    auto inner = std::make_shared<torch::optim::SGD>(net->parameters(),
                                                     torch::optim::SGDOptions(0.1));
    // One bucket per gradient (bucket_bytes 0), so each is submitted as soon
    // as backward produced it.
    kt::DistributedOptimizerOptions options;
    options.bucket_bytes = 0;
    kt::DistributedOptimizer opt(inner, net->named_parameters(), options, ctx);
    opt.zero_grad();
    // The gradient of h1 is computed after fc3's and fc2's gradients were
    // accumulated and before fc1's: their hooks must have fired by then.
    auto probe = [&](const at::Tensor& h1) {
      h1.register_hook([&, rank](const at::Tensor&) { seenInBackward[rank] = opt.submitted(); });
    };
    auto loss = net->forward(torch::ones({3, kIn}) * (rank + 1), false, probe).pow(2).mean();
    loss.backward();
    afterBackward[rank] = opt.submitted();
    opt.step();
    EXPECT_EQ(opt.submitted(), 0);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_GE(seenInBackward[r], 4) << "rank " << r << ": fc3/fc2 allreduces not yet enqueued";
    EXPECT_LT(seenInBackward[r], 6);
    EXPECT_EQ(afterBackward[r], 6);
  }
}

TEST_F(TorchOptimizer, MisuseIsReported) {
  spawn(2, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    auto net = std::make_shared<Net>();
    kt::broadcast_parameters(*net, 0, ctx);
    auto inner = std::make_shared<torch::optim::SGD>(net->parameters(),
                                                     torch::optim::SGDOptions(0.1));
    kt::DistributedOptimizer opt(inner, net->named_parameters(), {}, ctx);
    net->forward(torch::ones({2, kIn}) * rank).sum().backward();
    try {
      opt.zero_grad();
      ADD_FAILURE() << "zero_grad with pending allreduces did not throw";
    } catch (const kolo::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("in flight"), std::string::npos) << e.what();
    }
    // A second backward before step() exceeds backward_passes_per_step.
    try {
      net->forward(torch::ones({2, kIn})).sum().backward();
      ADD_FAILURE() << "a second backward before step() did not throw";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("backward_passes_per_step"), std::string::npos)
          << e.what();
    }
    opt.synchronize();
    opt.synchronize();  // nothing new: a no-op
    opt.step();
    opt.zero_grad();
    net->forward(torch::ones({2, kIn})).sum().backward();
    opt.step();
  });
}

TEST_F(TorchOptimizer, ConstructionErrors) {
  spawn(1, [&](int, kolo::Engine& engine) {
    kt::Context ctx(engine);
    auto net = std::make_shared<Net>();
    auto expectError = [](const std::function<void()>& fn, const std::string& needle) {
      try {
        fn();
        ADD_FAILURE() << "no error; expected '" << needle << "'";
      } catch (const kolo::InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    };
    auto lbfgs = std::make_shared<torch::optim::LBFGS>(net->parameters());
    expectError([&] { kt::DistributedOptimizer(lbfgs, net->named_parameters(), {}, ctx); },
                "LBFGS");
    auto sgdOpt = std::make_shared<torch::optim::SGD>(net->parameters(),
                                                      torch::optim::SGDOptions(0.1));
    kt::NamedTensors missing = kt::to_named_tensors(net->named_parameters());
    missing.pop_back();
    expectError([&] { kt::DistributedOptimizer(sgdOpt, missing, {}, ctx); },
                "is not named in it");
    kt::NamedTensors dup = kt::to_named_tensors(net->named_parameters());
    dup[1].first = dup[0].first;
    expectError([&] { kt::DistributedOptimizer(sgdOpt, dup, {}, ctx); },
                "must be unique; found duplicates: 'fc1.weight'");
    kt::DistributedOptimizerOptions bad;
    bad.backward_passes_per_step = 0;
    expectError([&] { kt::DistributedOptimizer(sgdOpt, net->named_parameters(), bad, ctx); },
                "backward_passes_per_step");
    bad = {};
    bad.op = kt::Max;
    expectError([&] { kt::DistributedOptimizer(sgdOpt, net->named_parameters(), bad, ctx); },
                "Average, Sum or Adasum");
    bad = {};
    bad.groups = {{"fc1.weight", "nope"}};
    expectError([&] { kt::DistributedOptimizer(sgdOpt, net->named_parameters(), bad, ctx); },
                "'nope'");
    // A failed construction leaves no hook behind: training still works.
    kt::DistributedOptimizer ok(sgdOpt, net->named_parameters(), {}, ctx);
    net->forward(torch::ones({1, kIn})).sum().backward();
    ok.step();
  });
}

TEST_F(TorchOptimizer, WrappedOptimizerKeepsSchedulersAndFrozenParameters) {
  spawn(2, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    auto net = std::make_shared<Net>();
    kt::broadcast_parameters(*net, 0, ctx);
    net->fc1->bias.set_requires_grad(false);  // frozen: never reduced
    auto inner = std::make_shared<torch::optim::SGD>(net->parameters(),
                                                     torch::optim::SGDOptions(0.4));
    kt::DistributedOptimizer opt(inner, net->named_parameters(), {}, ctx);
    torch::optim::StepLR scheduler(opt.optimizer(), /*step_size=*/1, /*gamma=*/0.5);
    at::Tensor frozen = net->fc1->bias.clone();
    for (int s = 0; s < 2; ++s) {
      opt.zero_grad();
      net->forward(torch::ones({2, kIn}) * (rank + s)).sum().backward();
      opt.step();
      scheduler.step();
    }
    // The scheduler drives the wrapped optimizer exactly as a plain one.
    auto plain = std::make_shared<torch::optim::SGD>(net->parameters(),
                                                     torch::optim::SGDOptions(0.4));
    torch::optim::StepLR plainScheduler(*plain, 1, 0.5);
    plainScheduler.step();
    plainScheduler.step();
    EXPECT_DOUBLE_EQ(opt.optimizer().param_groups()[0].options().get_lr(),
                     plain->param_groups()[0].options().get_lr());
    EXPECT_LT(opt.optimizer().param_groups()[0].options().get_lr(), 0.4);
    EXPECT_TRUE(torch::equal(net->fc1->bias, frozen));
  });
}

// Adam state of every parameter in parameter order, plus the group's lr.
struct AdamSnapshot {
  std::vector<at::Tensor> tensors;
  std::vector<int64_t> steps;
  double lr = 0;
  bool amsgrad = false;
};

AdamSnapshot adamState(torch::optim::Adam& adam) {
  AdamSnapshot out;
  for (const auto& p : adam.param_groups()[0].params()) {
    auto it = adam.state().find(kt::compat::stateKey(p));
    if (it == adam.state().end()) continue;
    auto& st = static_cast<torch::optim::AdamParamState&>(*it->second);
    out.tensors.push_back(st.exp_avg().clone());
    out.tensors.push_back(st.exp_avg_sq().clone());
    if (st.max_exp_avg_sq().defined()) out.tensors.push_back(st.max_exp_avg_sq().clone());
    out.steps.push_back(st.step());
  }
  auto& options = static_cast<torch::optim::AdamOptions&>(adam.param_groups()[0].options());
  out.lr = options.lr();
  out.amsgrad = options.amsgrad();
  return out;
}

TEST_F(TorchOptimizer, BroadcastOptimizerStateMakesAFreshRankIdentical) {
  const int n = 3;
  std::vector<AdamSnapshot> states(n);
  std::vector<std::vector<at::Tensor>> finals(n);
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    auto net = std::make_shared<Net>();
    std::shared_ptr<torch::optim::Adam> adam;
    if (rank == 0) {
      // Rank 0 "resumed from a checkpoint": trained a few steps, lowered lr.
      adam = std::make_shared<torch::optim::Adam>(
          net->parameters(), torch::optim::AdamOptions(0.02).amsgrad(true));
      for (int s = 0; s < 3; ++s) {
        adam->zero_grad();
        net->forward(torch::ones({2, kIn}) * (s + 1)).pow(2).mean().backward();
        adam->step();
      }
      static_cast<torch::optim::AdamOptions&>(adam->param_groups()[0].options()).lr(0.005);
    } else {
      adam = std::make_shared<torch::optim::Adam>(net->parameters(),
                                                  torch::optim::AdamOptions(1e-3));
    }
    kt::broadcast_parameters(*net, 0, ctx);
    kt::broadcast_optimizer_state(*adam, 0, ctx);
    states[rank] = adamState(*adam);
    // Identical from here on: one more distributed step.
    kt::DistributedOptimizer opt(adam, net->named_parameters(), {}, ctx);
    opt.zero_grad();
    net->forward(torch::ones({2, kIn}) * rank).pow(2).mean().backward();
    opt.step();
    finals[rank] = snapshot(*net);
  });
  ASSERT_EQ(states[0].steps.size(), 6u);
  ASSERT_EQ(states[0].tensors.size(), 18u);
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(states[r].lr, 0.005);
    EXPECT_TRUE(states[r].amsgrad);
    EXPECT_EQ(states[r].steps, states[0].steps);
    ASSERT_EQ(states[r].tensors.size(), states[0].tensors.size());
    for (size_t i = 0; i < states[0].tensors.size(); ++i) {
      EXPECT_TRUE(torch::equal(states[r].tensors[i], states[0].tensors[i])) << "tensor " << i;
    }
    for (size_t i = 0; i < finals[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(finals[r][i], finals[0][i])) << "rank " << r << " param " << i;
    }
  }
}

TEST_F(TorchOptimizer, BroadcastOptimizerStateForSgdMomentum) {
  const int n = 2;
  std::vector<std::vector<at::Tensor>> buffers(n);
  std::vector<double> lrs(n), momenta(n);
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    auto net = std::make_shared<Net>();
    auto sgdOpt = std::make_shared<torch::optim::SGD>(
        net->parameters(), torch::optim::SGDOptions(rank == 1 ? 0.3 : 0.01)
                               .momentum(rank == 1 ? 0.8 : 0.0));
    if (rank == 1) {
      net->forward(torch::ones({2, kIn})).sum().backward();
      sgdOpt->step();
    }
    kt::broadcast_optimizer_state(*sgdOpt, /*root=*/1, ctx);
    for (const auto& p : sgdOpt->param_groups()[0].params()) {
      auto& st = static_cast<torch::optim::SGDParamState&>(
          *sgdOpt->state().at(kt::compat::stateKey(p)));
      buffers[rank].push_back(st.momentum_buffer().clone());
    }
    auto& o = static_cast<torch::optim::SGDOptions&>(sgdOpt->param_groups()[0].options());
    lrs[rank] = o.lr();
    momenta[rank] = o.momentum();
  });
  EXPECT_EQ(lrs[0], 0.3);
  EXPECT_EQ(momenta[0], 0.8);
  ASSERT_EQ(buffers[0].size(), buffers[1].size());
  for (size_t i = 0; i < buffers[0].size(); ++i) {
    EXPECT_TRUE(torch::equal(buffers[0][i], buffers[1][i]));
  }
}

}  // namespace
