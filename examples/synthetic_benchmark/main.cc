// Synthetic training throughput, like Horovod's synthetic benchmark: a
// ResNet on random data, images/s per rank and in total, mean +- 1.96 std
// over iterations after warm-up. --no-kolo runs the identical loop with a
// plain optimizer and no communication, for the overhead ratio.
//
//   kolorun -np 2 ./synthetic_benchmark [--model resnet18|resnet50] [--batch-size 16]
//       [--image-size 64] [--num-warmup-batches 3] [--num-batches-per-iter 3]
//       [--num-iters 5] [--no-kolo] [--fp16-allreduce] [--device cpu|cuda]
//
// --device: default cuda:local_rank when LibTorch sees a GPU, else the CPU.
// On a GPU each timed iteration ends when the GPU has finished its work.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <kolo/torch.h>

#include "resnet.h"

namespace kt = kolo::torch;

int main(int argc, char** argv) {
  std::string model = "resnet18";
  int64_t batch = 16, image = 64;
  int warmup = 3, perIter = 3, iters = 5;
  bool useKolo = true, fp16 = false;
  std::string deviceName;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&] { return std::string(i + 1 < argc ? argv[++i] : "0"); };
    if (k == "--model") model = val();
    else if (k == "--batch-size") batch = std::stoll(val());
    else if (k == "--image-size") image = std::stoll(val());
    else if (k == "--num-warmup-batches") warmup = std::stoi(val());
    else if (k == "--num-batches-per-iter") perIter = std::stoi(val());
    else if (k == "--num-iters") iters = std::stoi(val());
    else if (k == "--no-kolo") useKolo = false;
    else if (k == "--fp16-allreduce") fp16 = true;
    else if (k == "--device") deviceName = val();
    else {
      std::printf("usage: synthetic_benchmark [--model resnet18|resnet50] [--batch-size N] "
                  "[--image-size N] [--num-warmup-batches N] [--num-batches-per-iter N] "
                  "[--num-iters N] [--no-kolo] [--fp16-allreduce] [--device cpu|cuda]\n");
      return k == "--help" ? 0 : 2;
    }
  }
  torch::set_num_threads(1);
  kt::init();
  const int rank = kt::rank(), size = kt::size();
  auto device = kt::device();
  if (deviceName == "cpu") device = torch::Device(torch::kCPU);
  if (deviceName == "cuda") {
    if (!torch::cuda::is_available()) {
      std::fprintf(stderr, "--device cuda: LibTorch sees no CUDA device\n");
      return 2;
    }
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(kt::local_rank()));
  }
  torch::manual_seed(0);
  auto net = makeResNet(model);
  net->to(device);
  auto sgd = std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.01));
  std::unique_ptr<kt::DistributedOptimizer> dist;
  if (useKolo) {
    kt::broadcast_parameters(*net, 0);
    kt::DistributedOptimizerOptions options;
    if (fp16) options.compression = kt::Compression::kFP16;
    dist = std::make_unique<kt::DistributedOptimizer>(sgd, net->named_parameters(), options);
  }
  auto data = torch::randn({batch, 3, image, image}, device);
  auto target = torch::randint(0, 1000, {batch}, torch::TensorOptions(device).dtype(torch::kLong));

  // Waits until the device has finished everything queued so far.
  auto drain = [&] {
    if (device.is_cuda()) (void)net->parameters()[0].sum().item<float>();
  };
  auto step = [&] {
    if (dist) {
      dist->zero_grad();
    } else {
      sgd->zero_grad();
    }
    auto loss = torch::nn::functional::cross_entropy(net->forward(data), target);
    loss.backward();
    if (dist) {
      dist->step();
    } else {
      sgd->step();
    }
  };
  if (rank == 0) {
    std::printf("model %s, batch %lld, image %lldx%lld, %d ranks, %s, on %s\n", model.c_str(),
                static_cast<long long>(batch), static_cast<long long>(image),
                static_cast<long long>(image), size, useKolo ? "kolo" : "no communication",
                device.str().c_str());
  }
  for (int i = 0; i < warmup; ++i) step();
  drain();
  std::vector<double> rates;
  for (int it = 0; it < iters; ++it) {
    auto start = std::chrono::steady_clock::now();
    for (int b = 0; b < perIter; ++b) step();
    drain();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(static_cast<double>(batch * perIter) / secs);
    if (rank == 0) std::printf("iter %d: %.2f img/s per rank\n", it, rates.back());
  }
  double mean = 0, var = 0;
  for (double r : rates) mean += r;
  mean /= rates.size();
  for (double r : rates) var += (r - mean) * (r - mean);
  double conf = 1.96 * std::sqrt(var / rates.size());
  if (rank == 0) {
    std::printf("img/s per rank: %.2f +- %.2f\n", mean, conf);
    std::printf("total img/s on %d ranks: %.2f +- %.2f\n", size, mean * size, conf * size);
    std::printf("step time: %.2f ms\n", 1000.0 * batch / mean);
  }
  kt::shutdown();
  return 0;
}
