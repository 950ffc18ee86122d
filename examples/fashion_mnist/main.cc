// Fashion-MNIST CNN trained data-parallel with kolo.
//
//   kolorun -np 2 ./fashion_mnist [--epochs 3] [--batch-size 64] [--lr 0.001] [--data DIR]
//       [--device cpu|cuda]   (default: cuda:local_rank when LibTorch sees a GPU)
//
// Each rank reads a disjoint shard of the training set (a distributed
// sampler), gradients are averaged by kolo's DistributedOptimizer while
// backward runs, and rank 0 prints per-epoch loss, test accuracy and
// images/s.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <kolo/torch.h>

namespace kt = kolo::torch;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)))),
        fc1(register_module("fc1", torch::nn::Linear(64 * 5 * 5, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);  // 26 -> 13
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);  // 11 -> 5
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
  double lr = 1e-3;
  std::string data = KOLO_FASHION_MNIST_DIR;
  std::string device;  // "", "cpu" or "cuda"
};

Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fashion_mnist: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--epochs") {
      a.epochs = std::stoi(next());
    } else if (k == "--batch-size") {
      a.batchSize = std::stoll(next());
    } else if (k == "--lr") {
      a.lr = std::stod(next());
    } else if (k == "--data") {
      a.data = next();
    } else if (k == "--device") {
      a.device = next();
    } else {
      std::printf("usage: fashion_mnist [--epochs N] [--batch-size B] [--lr LR] [--data DIR] "
                  "[--device cpu|cuda]\n");
      std::exit(k == "--help" || k == "-h" ? 0 : 2);
    }
  }
  return a;
}

int main(int argc, char** argv) {
  Args args = parseArgs(argc, argv);
  torch::set_num_threads(1);  // one core per rank; kolo's thread needs the rest
  kt::init();
  const int rank = kt::rank();
  const int size = kt::size();
  torch::manual_seed(1234 + rank);

  auto normalize = torch::data::transforms::Normalize<>(0.2860, 0.3530);
  auto train = torch::data::datasets::MNIST(args.data, torch::data::datasets::MNIST::Mode::kTrain)
                   .map(normalize)
                   .map(torch::data::transforms::Stack<>());
  auto test = torch::data::datasets::MNIST(args.data, torch::data::datasets::MNIST::Mode::kTest)
                  .map(normalize)
                  .map(torch::data::transforms::Stack<>());
  const size_t trainSize = *train.size();
  const size_t testSize = *test.size();
  torch::data::samplers::DistributedRandomSampler sampler(trainSize, size, rank);
  auto trainLoader = torch::data::make_data_loader(
      std::move(train), sampler, torch::data::DataLoaderOptions().batch_size(args.batchSize));
  torch::data::samplers::DistributedSequentialSampler testSampler(testSize, size, rank);
  auto testLoader = torch::data::make_data_loader(
      std::move(test), testSampler, torch::data::DataLoaderOptions().batch_size(1000));

  torch::Device device = kt::device();
  if (args.device == "cpu") device = torch::Device(torch::kCPU);
  if (args.device == "cuda") {
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(kt::local_rank()));
  }
  Net model;
  model->to(device);
  kt::broadcast_parameters(*model, 0);  // every rank starts from rank 0's weights
  auto adam = std::make_shared<torch::optim::Adam>(
      model->parameters(), torch::optim::AdamOptions(args.lr * size));
  kt::DistributedOptimizer optimizer(adam, model->named_parameters());

  const size_t batchesPerEpoch = (trainSize / size + args.batchSize - 1) / args.batchSize;
  if (rank == 0) {
    std::printf("Fashion-MNIST: %zu training images, %d ranks, batch %lld per rank, on %s\n",
                trainSize, size, static_cast<long long>(args.batchSize), device.str().c_str());
    std::fflush(stdout);
  }
  double accuracy = 0;
  for (int epoch = 1; epoch <= args.epochs; ++epoch) {
    model->train();
    sampler.set_epoch(static_cast<size_t>(epoch));
    auto start = std::chrono::steady_clock::now();
    double lossSum = 0;
    size_t batches = 0, images = 0;
    for (auto& batch : *trainLoader) {
      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model->forward(batch.data.to(device)),
                                                       batch.target.to(device));
      loss.backward();
      optimizer.step();
      lossSum += loss.item<double>();
      images += static_cast<size_t>(batch.data.size(0));
      ++batches;
      if (rank == 0 && batches % 100 == 0) {
        std::printf("  epoch %d: %zu/%zu batches, loss %.4f\n", epoch, batches, batchesPerEpoch,
                    lossSum / batches);
        std::fflush(stdout);
      }
    }
    if (batches == 0) batches = 1;
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Loss averaged over ranks, images counted over ranks.
    auto stats = torch::tensor({lossSum / static_cast<double>(batches), static_cast<double>(images)},
                               torch::kFloat64);
    auto meanLoss = kt::allreduce(stats.slice(0, 0, 1), kt::Average, "epoch.loss").item<double>();
    auto allImages = kt::allreduce(stats.slice(0, 1, 2), kt::Sum, "epoch.images").item<double>();

    model->eval();
    torch::NoGradGuard noGrad;
    int64_t correct = 0, seen = 0;
    for (auto& batch : *testLoader) {
      auto predicted = model->forward(batch.data.to(device)).argmax(1);
      correct += predicted.eq(batch.target.to(device)).sum().item<int64_t>();
      seen += batch.data.size(0);
    }
    auto counts = kt::allreduce(torch::tensor({correct, seen}, torch::kInt64), kt::Sum, "test.counts");
    accuracy = static_cast<double>(counts[0].item<int64_t>()) / counts[1].item<int64_t>();
    if (rank == 0) {
      std::printf("epoch %d: loss %.4f, test accuracy %.2f%%, %.0f images/s (%.1f s)\n", epoch,
                  meanLoss, 100.0 * accuracy, allImages / seconds, seconds);
      std::fflush(stdout);
    }
  }
  kt::shutdown();
  return 0;
}
