// Fashion-MNIST trained data-parallel on the c10d process-group API, the way
// LibTorch programs written for c10d::ProcessGroupMPI are: the program owns
// its loop, averages each gradient with pg->allreduce(...)->wait(), and
// calls pg->abort() when a collective fails.
//
// Moving such a program to kolo changes two lines: the include, and the one
// that creates the group. Everything else (getRank, getSize, allreduce,
// broadcast, Work::wait, abort) is c10d's API:
//
//   #include <torch/csrc/distributed/c10d/ProcessGroupMPI.hpp>
//   auto pg = c10d::ProcessGroupMPI::createProcessGroupMPI();
// becomes
//   #include <kolo/torch/c10d.h>
//   auto pg = kolo::torch::ProcessGroupKolo::createProcessGroupKolo();
//
// Run under kolorun, mpirun or torchrun:
//   kolorun -np 2 ./c10d_mnist [--epochs 1] [--batch-size 64] [--lr 0.01] [--data DIR]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <kolo/torch/c10d.h>

namespace {

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : hidden(register_module("hidden", torch::nn::Linear(28 * 28, 256))),
        out(register_module("out", torch::nn::Linear(256, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    return out->forward(torch::relu(hidden->forward(x.flatten(1))));
  }

  torch::nn::Linear hidden, out;
};
TORCH_MODULE(Mlp);

struct Args {
  int epochs = 1;
  int64_t batchSize = 64;
  double lr = 0.01;
  std::string data = KOLO_FASHION_MNIST_DIR;
};

Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 < argc && k == "--epochs") {
      a.epochs = std::stoi(argv[++i]);
    } else if (i + 1 < argc && k == "--batch-size") {
      a.batchSize = std::stoll(argv[++i]);
    } else if (i + 1 < argc && k == "--lr") {
      a.lr = std::stod(argv[++i]);
    } else if (i + 1 < argc && k == "--data") {
      a.data = argv[++i];
    } else {
      std::printf("usage: c10d_mnist [--epochs N] [--batch-size B] [--lr LR] [--data DIR]\n");
      std::exit(k == "--help" || k == "-h" ? 0 : 2);
    }
  }
  return a;
}

// Waits for every work; on a failure, aborts the group (the other ranks'
// calls fail then too, naming this one) and rethrows.
template <typename PG>
void waitAll(const c10::intrusive_ptr<PG>& pg,
             const std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
  for (const auto& work : works) {
    try {
      work->wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: a collective failed: %s\n", pg->getRank(), e.what());
      pg->abort();
      throw;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parseArgs(argc, argv);
  torch::set_num_threads(1);
  auto pg = kolo::torch::ProcessGroupKolo::createProcessGroupKolo();
  const int rank = pg->getRank();
  const int size = pg->getSize();

  auto normalize = torch::data::transforms::Normalize<>(0.2860, 0.3530);
  auto train = torch::data::datasets::MNIST(args.data)
                   .map(normalize)
                   .map(torch::data::transforms::Stack<>());
  auto test = torch::data::datasets::MNIST(args.data, torch::data::datasets::MNIST::Mode::kTest)
                  .map(normalize)
                  .map(torch::data::transforms::Stack<>());
  const size_t trainSize = *train.size();
  torch::data::samplers::DistributedRandomSampler sampler(trainSize, size, rank);
  auto trainLoader = torch::data::make_data_loader(
      std::move(train), sampler, torch::data::DataLoaderOptions().batch_size(args.batchSize));
  auto testLoader =
      torch::data::make_data_loader(std::move(test), torch::data::DataLoaderOptions(1000));

  torch::manual_seed(rank);  // different on purpose: rank 0's weights are broadcast below
  Mlp model;
  {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (auto& p : model->parameters()) {
      std::vector<at::Tensor> tensors = {p.data()};
      works.push_back(pg->broadcast(tensors));
    }
    waitAll(pg, works);
  }
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(args.lr).momentum(0.9));

  for (int epoch = 1; epoch <= args.epochs; ++epoch) {
    model->train();
    sampler.set_epoch(static_cast<size_t>(epoch));
    const auto start = std::chrono::steady_clock::now();
    double lossSum = 0;
    int64_t batches = 0;
    for (auto& batch : *trainLoader) {
      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model->forward(batch.data), batch.target);
      loss.backward();
      // Average the gradients: start every allreduce, then wait for them all.
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      for (auto& p : model->parameters()) {
        std::vector<at::Tensor> grad = {p.grad()};
        works.push_back(pg->allreduce(grad));
      }
      waitAll(pg, works);
      for (auto& p : model->parameters()) p.grad().div_(size);
      optimizer.step();
      lossSum += loss.item<double>();
      ++batches;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Every rank evaluates the whole test set with the same weights; the
    // accuracies are averaged to show that they agree.
    model->eval();
    torch::NoGradGuard noGrad;
    int64_t correct = 0, seen = 0;
    for (auto& batch : *testLoader) {
      correct += model->forward(batch.data).argmax(1).eq(batch.target).sum().item<int64_t>();
      seen += batch.data.size(0);
    }
    std::vector<at::Tensor> stats = {
        torch::tensor({lossSum / std::max<int64_t>(batches, 1),
                       static_cast<double>(correct) / static_cast<double>(seen)},
                      torch::kFloat64)};
    waitAll(pg, {pg->allreduce(stats)});
    stats[0].div_(size);
    if (rank == 0) {
      std::printf("epoch %d: loss %.4f, test accuracy %.2f%% (%d ranks, %.1f s)\n", epoch,
                  stats[0][0].item<double>(), 100.0 * stats[0][1].item<double>(), size, seconds);
      std::fflush(stdout);
    }
  }
  return 0;
}
