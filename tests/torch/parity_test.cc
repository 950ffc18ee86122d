// Horovod parity in kolo::torch, ranks as threads: SyncBatchNorm against
// one process on the whole batch, DistributedOptimizer with Adasum and with
// sparse gradients against references computed here.
#include <gtest/gtest.h>

#include <kolo/torch.h>

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "harness/harness.h"

namespace {

namespace kt = kolo::torch;
using kolo::test::spawn;

class TorchParity : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

void expectClose(const at::Tensor& got, const at::Tensor& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  if (got.numel() == 0) return;
  const double err = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  EXPECT_LT(err, tol) << what << ": max error " << err;
}

// Rows [first, first + rows) of a deterministic (N, C, L) input.
at::Tensor inputRows(int64_t first, int64_t rows, int64_t c, int64_t l) {
  at::Tensor idx = torch::arange(first * c * l, (first + rows) * c * l, torch::kDouble);
  return (idx * 0.37).sin().mul(3.0).add(idx.fmod(5.0) * 0.1).reshape({rows, c, l}).to(at::kFloat);
}

// N ranks with batches of different sizes (one of them empty) against one
// torch::nn::BatchNorm1d on the concatenated batch: outputs, input
// gradients, the sum of the weight and bias gradients, running statistics
// over two steps, then eval mode.
TEST_F(TorchParity, SyncBatchNormMatchesOneProcessOnTheWholeBatch) {
  const int n = 3;
  const int64_t c = 4, l = 5;
  const std::vector<int64_t> rows = {3, 0, 2};
  const int64_t total = 5;
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    int64_t first = 0;
    for (int r = 0; r < rank; ++r) first += rows[r];
    torch::nn::BatchNorm1d ref(torch::nn::BatchNormOptions(c).momentum(0.3));
    kt::SyncBatchNorm sync(torch::nn::BatchNormOptions(c).momentum(0.3), ctx);
    {
      torch::NoGradGuard noGrad;
      ref->weight.copy_(torch::linspace(0.5, 2.0, c));
      ref->bias.copy_(torch::linspace(-1.0, 1.0, c));
      sync->weight.copy_(ref->weight);
      sync->bias.copy_(ref->bias);
    }
    for (int step = 0; step < 2; ++step) {
      at::Tensor all = inputRows(0, total, c, l).mul(step + 1.0).requires_grad_(true);
      at::Tensor probe =
          torch::cos(torch::arange(total * c * l, torch::kFloat)).reshape({total, c, l});
      at::Tensor want = ref->forward(all);
      (want * probe).sum().backward();

      at::Tensor mine = inputRows(first, rows[rank], c, l).mul(step + 1.0).requires_grad_(true);
      at::Tensor got = sync->forward(mine);
      (got * probe.narrow(0, first, rows[rank])).sum().backward();

      const std::string at = "step " + std::to_string(step) + " rank " + std::to_string(rank);
      expectClose(got, want.narrow(0, first, rows[rank]), 1e-5, "output " + at);
      expectClose(mine.grad(), all.grad().narrow(0, first, rows[rank]), 1e-5, "input grad " + at);
      expectClose(ctx.allreduce(sync->weight.grad(), kt::Sum, "w" + std::to_string(step)),
                  ref->weight.grad(), 1e-4, "weight grad " + at);
      expectClose(ctx.allreduce(sync->bias.grad(), kt::Sum, "b" + std::to_string(step)),
                  ref->bias.grad(), 1e-4, "bias grad " + at);
      expectClose(sync->running_mean, ref->running_mean, 1e-6, "running mean " + at);
      expectClose(sync->running_var, ref->running_var, 1e-5, "running var " + at);
      EXPECT_EQ(sync->num_batches_tracked.item<int64_t>(), step + 1);
      sync->weight.mutable_grad() = at::Tensor();
      sync->bias.mutable_grad() = at::Tensor();
      ref->weight.mutable_grad() = at::Tensor();
      ref->bias.mutable_grad() = at::Tensor();
    }
    // Eval: the running statistics, no communication (ranks may differ).
    ref->eval();
    sync->eval();
    at::Tensor x = inputRows(7 * rank, 2 + rank, c, l);
    expectClose(sync->forward(x), ref->forward(x), 1e-6, "eval");
    // A 2-D input (N, C) and the clear error for 1-D.
    sync->train();
    ref->train();
    at::Tensor flat = inputRows(first, rows[rank], c, 1).squeeze(2);
    at::Tensor flatAll = inputRows(0, total, c, 1).squeeze(2);
    expectClose(sync->forward(flat), ref->forward(flatAll).narrow(0, first, rows[rank]), 1e-5,
                "2-D");
    EXPECT_THROW(sync->forward(torch::ones({4})), kolo::InvalidArgument);
  });
}

// Adasum of two vectors (float64), the paper's formula.
at::Tensor adasumPair(const at::Tensor& a, const at::Tensor& b) {
  const double dot = (a * b).sum().item<double>();
  const double aa = (a * a).sum().item<double>();
  const double bb = (b * b).sum().item<double>();
  const double tiny = std::sqrt(DBL_MIN);
  const double ca = aa >= tiny ? 1 - dot / (2 * aa) : 1;
  const double cb = bb >= tiny ? 1 - dot / (2 * bb) : 1;
  return a * ca + b * cb;
}

// The documented tree over ranks' tensors.
at::Tensor adasumTree(std::vector<at::Tensor> v) {
  const int n = static_cast<int>(v.size());
  int p = 1;
  while (p * 2 <= n) p *= 2;
  for (int i = 0; i + p < n; ++i) v[i] = adasumPair(v[i], v[p + i]);
  for (int s = 1; s < p; s *= 2) {
    for (int k = 0; k + s < p; k += 2 * s) v[k] = adasumPair(v[k], v[k + s]);
  }
  return v[0];
}

// Horovod's delta optimizer: each rank's wrapped optimizer steps locally,
// the parameter changes are combined with Adasum. Two steps of SGD with
// momentum (state carried between steps), on 2 and 3 ranks.
TEST_F(TorchParity, DistributedOptimizerAdasumCombinesTheLocalUpdates) {
  for (int n : {2, 3}) {
    spawn(n, [&](int rank, kolo::Engine& engine) {
      kt::Context ctx(engine);
      torch::nn::Linear model(3, 2);
      torch::nn::Linear shadow(3, 2);  // the same model stepped by plain LibTorch
      {
        torch::NoGradGuard noGrad;
        model->weight.copy_(torch::linspace(-0.5, 0.5, 6).reshape({2, 3}));
        model->bias.copy_(torch::tensor({0.1f, -0.2f}));
        shadow->weight.copy_(model->weight);
        shadow->bias.copy_(model->bias);
      }
      auto sgdOptions = torch::optim::SGDOptions(0.1).momentum(0.9);
      auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), sgdOptions);
      torch::optim::SGD shadowSgd(shadow->parameters(), sgdOptions);
      kt::DistributedOptimizerOptions options;
      options.op = kt::Adasum;
      kt::DistributedOptimizer opt(sgd, model->named_parameters(), options, ctx);
      EXPECT_THROW((void)opt.skip_synchronize(), kolo::InvalidArgument);
      for (int step = 0; step < 2; ++step) {
        at::Tensor x =
            torch::arange(12, torch::kFloat).reshape({4, 3}).mul(0.1 * (rank + 1 + step));
        at::Tensor y = torch::ones({4, 2}) * (rank - 1.0);
        opt.zero_grad();
        torch::mse_loss(model->forward(x), y).backward();
        opt.step();
        // Reference: the same local step, then Adasum over the ranks' deltas.
        std::vector<at::Tensor> before = {shadow->weight.detach().clone(),
                                          shadow->bias.detach().clone()};
        shadowSgd.zero_grad();
        torch::mse_loss(shadow->forward(x), y).backward();
        shadowSgd.step();
        std::vector<at::Tensor> params = {shadow->weight, shadow->bias};
        std::vector<at::Tensor> got = {model->weight, model->bias};
        for (size_t k = 0; k < 2; ++k) {
          at::Tensor delta = (params[k].detach() - before[k]).to(at::kDouble).unsqueeze(0);
          at::Tensor all =
              ctx.allgather(delta, "ref." + std::to_string(step) + "." + std::to_string(k));
          std::vector<at::Tensor> deltas;
          for (int r = 0; r < n; ++r) deltas.push_back(all[r]);
          at::Tensor want = before[k].to(at::kDouble) + adasumTree(deltas);
          expectClose(got[k], want, 1e-6,
                      "np" + std::to_string(n) + " step " + std::to_string(step) + " param " +
                          std::to_string(k));
          torch::NoGradGuard noGrad;
          params[k].copy_(got[k]);  // continue from the combined parameters
        }
      }
    });
  }
}

// adasum_delta_step on its own: the transforms see every parameter's change
// in order, and a reduction that fails (an int32 change, which Adasum
// refuses) throws on every rank with every parameter back at its value
// before the step.
TEST_F(TorchParity, AdasumDeltaStepTransformsEachChangeAndRestoresOnFailure) {
  spawn(2, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    std::vector<at::Tensor> params = {torch::zeros({3}, torch::kFloat).requires_grad_(),
                                      torch::ones({2, 2}, torch::kDouble).requires_grad_()};
    const std::vector<std::string> names = {"delta.a", "delta.b"};
    auto localStep = [&] {
      torch::NoGradGuard noGrad;
      for (auto& p : params) p.add_(rank + 1.0);  // changes a (rank 0) and 2a (rank 1)
    };
    std::vector<size_t> seen;
    auto twice = [&](size_t i, const at::Tensor& t) {
      seen.push_back(i);
      return t * 2;
    };
    auto half = [](size_t, const at::Tensor& t) { return t / 2; };
    kt::adasum_delta_step(params, names, localStep, twice, half, kt::ProcessSet(), ctx);
    EXPECT_EQ(seen, (std::vector<size_t>{0, 1}));
    // Adasum(a, b) = a + b - (a.b / 2|a|^2) a - (a.b / 2|b|^2) b; for b = 2a
    // that is 3a - a - a/2 = 1.5a (and the doubling and halving cancel).
    expectClose(params[0], torch::full({3}, 1.5, torch::kDouble), 1e-6, "float param");
    expectClose(params[1], torch::full({2, 2}, 2.5, torch::kDouble), 1e-9, "double param");
    EXPECT_TRUE(params[0].grad().defined());  // zeros for the parameter without a gradient

    const std::vector<at::Tensor> before = {params[0].detach().clone(),
                                            params[1].detach().clone()};
    auto toInt = [](size_t, const at::Tensor& t) { return t.to(at::kInt); };
    EXPECT_THROW(
        kt::adasum_delta_step(params, names, localStep, toInt, nullptr, kt::ProcessSet(), ctx),
        kolo::InvalidArgument);
    EXPECT_TRUE(torch::equal(params[0], before[0]));
    EXPECT_TRUE(torch::equal(params[1], before[1]));
    EXPECT_THROW(kt::adasum_delta_step(params, {"one name"}, localStep, nullptr, nullptr,
                                       kt::ProcessSet(), ctx),
                 kolo::InvalidArgument);
  });
}

// nn::Embedding(sparse) gradients: allgather of indices and values by default
// (the gradient stays sparse), or reduced dense with sparse_as_dense; both
// give every rank the parameters of the averaged dense gradient.
TEST_F(TorchParity, SparseGradientsAreAveragedByAllgatherOrAsDense) {
  const int n = 3;
  for (bool asDense : {false, true}) {
    spawn(n, [&](int rank, kolo::Engine& engine) {
      kt::Context ctx(engine);
      torch::nn::Embedding emb(torch::nn::EmbeddingOptions(10, 3).sparse(true));
      torch::nn::Linear head(3, 1);
      {
        torch::NoGradGuard noGrad;
        emb->weight.copy_(torch::arange(30, torch::kFloat).reshape({10, 3}).mul(0.05));
        head->weight.fill_(0.5);
        head->bias.fill_(0.0);
      }
      at::Tensor start = emb->weight.detach().clone();
      std::vector<std::pair<std::string, at::Tensor>> named;
      for (auto& p : emb->named_parameters()) named.emplace_back("emb." + p.key(), p.value());
      for (auto& p : head->named_parameters()) named.emplace_back("head." + p.key(), p.value());
      std::vector<at::Tensor> params;
      for (auto& p : named) params.push_back(p.second);
      auto sgd = std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(1.0));
      kt::DistributedOptimizerOptions options;
      options.sparse_as_dense = asDense;
      kt::DistributedOptimizer opt(sgd, named, options, ctx);
      // Rank r looks up rows r, r+1 and 7 (shared): the gathered gradient
      // holds duplicates that add up.
      at::Tensor ids = torch::tensor({int64_t(rank), int64_t(rank + 1), int64_t(7)});
      opt.zero_grad();
      head->forward(emb->forward(ids)).sum().backward();
      ASSERT_TRUE(emb->weight.grad().is_sparse());
      opt.step();
      EXPECT_TRUE(emb->weight.grad().is_sparse()) << "the reduced gradient stays sparse";
      // Reference: the dense gradient of rank r is 0.5 at its rows; averaged.
      at::Tensor dense = torch::zeros({10, 3});
      for (int r = 0; r < n; ++r) {
        for (int64_t row : {int64_t(r), int64_t(r + 1), int64_t(7)}) dense[row] += 0.5 / n;
      }
      expectClose(
          emb->weight, start - dense, 1e-6,
          std::string(asDense ? "sparse_as_dense" : "allgather") + " rank " + std::to_string(rank));
    });
  }
}

// broadcast_optimizer_state when some parameters never had a gradient (no
// state on root), one is frozen, and only root has stepped: afterwards the
// same step on every rank leaves bitwise-equal parameters.
TEST_F(TorchParity, BroadcastOptimizerStateWithParametersWithoutGradients) {
  const int n = 3;
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    torch::nn::Linear used(3, 2), unused(3, 2), frozen(3, 2);
    {
      torch::NoGradGuard noGrad;
      for (auto* m : {&used, &unused, &frozen}) {
        (*m)->weight.copy_(torch::linspace(-1, 1, 6).reshape({2, 3}));
        (*m)->bias.fill_(0.25);
      }
    }
    frozen->weight.requires_grad_(false);
    std::vector<at::Tensor> params;
    for (auto* m : {&used, &unused, &frozen}) {
      for (auto& p : (*m)->parameters()) params.push_back(p);
    }
    torch::optim::Adam adam(params, torch::optim::AdamOptions(0.01));
    auto step = [&](double scale) {
      adam.zero_grad();
      (used->forward(torch::ones({4, 3}) * scale) + frozen->forward(torch::ones({4, 3})))
          .sum()
          .backward();
      adam.step();
    };
    if (rank == 0) step(1.0);  // state for `used` (and frozen's bias) only
    kt::broadcast_optimizer_state(adam, 0, ctx);
    {
      torch::NoGradGuard noGrad;  // root's parameters too
      for (size_t k = 0; k < params.size(); ++k) {
        params[k].copy_(ctx.broadcast(params[k].detach(), 0, "bos.p" + std::to_string(k)));
      }
    }
    step(2.0);
    for (size_t k = 0; k < params.size(); ++k) {
      at::Tensor lo = ctx.allreduce(params[k].detach(), kt::Min, "bos.min." + std::to_string(k));
      at::Tensor hi = ctx.allreduce(params[k].detach(), kt::Max, "bos.max." + std::to_string(k));
      EXPECT_TRUE(torch::equal(lo, hi)) << "parameter " << k << " differs between ranks";
    }
  });
}

}  // namespace
