// Data-parallel training of a linear model on synthetic data: every rank
// draws its own batches, kolo averages the gradients, and every rank ends
// with the same weights.
#include <kolo/torch.h>
#include <torch/torch.h>

#include <cstdio>

int main() {
  kolo::init();
  torch::manual_seed(kolo::rank());  // different data (and initial weights) per rank

  torch::nn::Linear model(8, 1);
  model->to(kolo::torch::device());
  kolo::torch::broadcast_parameters(*model, /*root=*/0);  // rank 0's weights everywhere

  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(0.1));
  kolo::torch::DistributedOptimizer opt(sgd, model->named_parameters());

  const auto truth = torch::arange(1, 9, torch::kFloat).to(kolo::torch::device());
  for (int step = 0; step < 50; ++step) {
    auto x = torch::randn({32, 8}, kolo::torch::device());
    auto y = x.matmul(truth).unsqueeze(1);
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    loss.backward();  // gradients are averaged across ranks while backward runs
    opt.step();
    if (step % 10 == 0 && kolo::rank() == 0) {
      std::printf("step %d loss %.4f\n", step, loss.item<float>());
    }
  }

  // The same weights on every rank: the largest difference from rank 0's is 0.
  auto w = model->weight.detach().flatten();
  auto diff = (w - kolo::torch::broadcast(w, /*root=*/0)).abs().max().item<float>();
  std::printf("rank %d of %d: weights differ from rank 0's by %g\n", kolo::rank(),
              kolo::size(), diff);
  kolo::shutdown();
  return diff == 0.0f ? 0 : 1;
}
