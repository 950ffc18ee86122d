// Two-layer perceptron regression on synthetic data, y = sum(x^3) + noise,
// trained data-parallel with SGD + momentum. Each rank generates its own
// shard; the epoch's mean squared error is averaged across ranks.
//
//   kolorun -np 2 ./regression [--epochs 20] [--samples 4096] [--features 8]
#include <cstdio>
#include <string>

#include <kolo/torch.h>

namespace kt = kolo::torch;

int main(int argc, char** argv) {
  int epochs = 20;
  int64_t samples = 4096, features = 8, hidden = 64, batch = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--epochs") epochs = std::stoi(argv[i + 1]);
    if (k == "--samples") samples = std::stoll(argv[i + 1]);
    if (k == "--features") features = std::stoll(argv[i + 1]);
  }
  torch::set_num_threads(1);
  kt::init();
  const int rank = kt::rank(), size = kt::size();

  torch::manual_seed(42 + rank);  // a different shard of data per rank
  auto x = torch::rand({samples / size, features}) * 2 - 1;
  auto y = x.pow(3).sum(1, true) + 0.01 * torch::randn({samples / size, 1});

  torch::manual_seed(7);
  auto model = torch::nn::Sequential(torch::nn::Linear(features, hidden), torch::nn::Tanh(),
                                     torch::nn::Linear(hidden, 1));
  kt::broadcast_parameters(*model, 0);
  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(0.05).momentum(0.9));
  kt::DistributedOptimizer optimizer(sgd, model->named_parameters());

  double mse = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    auto perm = torch::randperm(x.size(0));
    double sum = 0;
    int64_t n = 0;
    for (int64_t start = 0; start < x.size(0); start += batch) {
      auto idx = perm.slice(0, start, std::min(start + batch, x.size(0)));
      optimizer.zero_grad();
      auto loss = torch::mse_loss(model->forward(x.index_select(0, idx)), y.index_select(0, idx));
      loss.backward();
      optimizer.step();
      sum += loss.item<double>() * idx.size(0);
      n += idx.size(0);
    }
    mse = kt::allreduce(torch::tensor({sum / n}, torch::kFloat64), kt::Average, "epoch.mse")
              .item<double>();
    if (rank == 0) std::printf("epoch %2d: mse %.5f\n", epoch, mse);
  }
  if (rank == 0) std::printf("final mse %.5f on %d ranks\n", mse, size);
  kt::shutdown();
  return 0;
}
