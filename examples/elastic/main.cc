// Elastic Fashion-MNIST training with kolo: the job survives the loss of
// ranks and grows when hosts appear, without restarting.
//
//   kolorun -np 4 --min-np 2 --max-np 8 --host-discovery-script ./discover_hosts.sh \
//       ./elastic_fashion_mnist [--epochs 3] [--batch-size 64] [--lr 0.001]
//   kolorun -np 4 --min-np 2 -H localhost:4 ./elastic_fashion_mnist   # a fixed host
//
// The model, the optimizer, the data sampler and the epoch/batch counters
// live in a TorchState: state.commit() saves them every --commit-every
// batches. When a rank dies, the others restore the last commit, re-form a
// smaller world and go on; when hosts are added, every rank stops at its next
// commit, the world grows, and the new ranks receive the state first.
// Try it: kill one of the worker processes mid-epoch.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <kolo/torch.h>
#include <kolo/torch/elastic.h>

namespace kt = kolo::torch;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)))),
        fc1(register_module("fc1", torch::nn::Linear(64 * 5 * 5, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(x);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

struct Args {
  int epochs = 3;
  int64_t batchSize = 64;
  int64_t commitEvery = 20;
  double lr = 1e-3;
  std::string data = KOLO_FASHION_MNIST_DIR;
};

const char kUsage[] =
    "usage: elastic_fashion_mnist [--epochs N] [--batch-size B] "
    "[--commit-every K] [--lr LR] [--data DIR]\n";

// Every option takes a value; --help (or -h) prints the usage and exits 0,
// anything else (an unknown option, a missing value) prints it and exits 2.
Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "elastic_fashion_mnist: %s needs a value\n%s", k.c_str(), kUsage);
      std::exit(2);
    }
    std::string v = argv[i + 1];
    if (k == "--epochs") a.epochs = std::stoi(v);
    else if (k == "--batch-size") a.batchSize = std::stoll(v);
    else if (k == "--commit-every") a.commitEvery = std::stoll(v);
    else if (k == "--lr") a.lr = std::stod(v);
    else if (k == "--data") a.data = v;
    else {
      std::fprintf(stderr, "elastic_fashion_mnist: unknown option %s\n%s", k.c_str(), kUsage);
      std::exit(2);
    }
  }
  return a;
}

void setLearningRate(torch::optim::Adam& adam, double lr) {
  for (auto& group : adam.param_groups()) {
    static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
  }
}

int main(int argc, char** argv) {
  Args args = parseArgs(argc, argv);
  torch::set_num_threads(1);
  auto normalize = [](torch::Tensor images) { return (images - 0.2860) / 0.3530; };
  auto train = torch::data::datasets::MNIST(args.data, torch::data::datasets::MNIST::Mode::kTrain);
  const torch::Tensor images = normalize(train.images());
  const torch::Tensor labels = train.targets();
  auto test = torch::data::datasets::MNIST(args.data, torch::data::datasets::MNIST::Mode::kTest);
  const torch::Tensor testImages = normalize(test.images());
  const torch::Tensor testLabels = test.targets();

  kt::init();  // waits for the first world that includes this process

  // No collective before kolo::elastic::run(): a worker that joins later
  // starts here while the others are already training.
  torch::manual_seed(1234);
  Net model;
  auto adam = std::make_shared<torch::optim::Adam>(
      model->parameters(), torch::optim::AdamOptions(args.lr * kt::size()));
  kt::DistributedOptimizer optimizer(adam, model->named_parameters());
  kolo::elastic::ElasticSampler sampler(images.size(0), /*shuffle=*/true, /*seed=*/42);
  kt::elastic::TorchState state(*model, optimizer, {{"epoch", 0}, {"batch", 0}});
  state.track("sampler", sampler);
  // After every re-formation: the learning rate follows the world size.
  state.register_reset_callbacks({[&] { setLearningRate(*adam, args.lr * kt::size()); }});

  kolo::elastic::run(state, [&] {
    if (kt::rank() == 0) {
      std::printf("world %lld: %d ranks, resuming at epoch %lld batch %lld\n",
                  static_cast<long long>(kolo::elastic::world_version()), kt::size(),
                  static_cast<long long>(state["epoch"]), static_cast<long long>(state["batch"]));
      std::fflush(stdout);
    }
    while (state["epoch"] < args.epochs) {
      model->train();
      const int64_t batches = (sampler.num_samples() + args.batchSize - 1) / args.batchSize;
      for (int64_t b = 0; b < batches; ++b) {
        auto which = torch::tensor(sampler.get_indices(b, args.batchSize), torch::kInt64);
        optimizer.zero_grad();
        auto loss = torch::nn::functional::cross_entropy(
            model->forward(images.index_select(0, which)), labels.index_select(0, which));
        loss.backward();
        optimizer.step();
        sampler.record_batch(b, args.batchSize);
        if (++state["batch"] % args.commitEvery == 0) state.commit();
      }
      // The epoch's end: the counters and the sampler move on together.
      state["epoch"] += 1;
      state["batch"] = 0;
      sampler.set_epoch(state["epoch"]);
      state.commit();

      model->eval();
      torch::NoGradGuard noGrad;
      auto correct = model->forward(testImages).argmax(1).eq(testLabels).sum();
      if (kt::rank() == 0) {
        std::printf("epoch %lld: test accuracy %.2f%% (%d ranks)\n",
                    static_cast<long long>(state["epoch"]),
                    100.0 * correct.item<double>() / testLabels.size(0), kt::size());
        std::fflush(stdout);
      }
    }
  });
  kt::shutdown();
  return 0;
}
