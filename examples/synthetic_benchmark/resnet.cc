#include "resnet.h"

#include <stdexcept>

namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride = 1) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t in, int64_t width, int64_t stride, bool bottleneck) {
    const int64_t out = bottleneck ? width * 4 : width;
    if (bottleneck) {
      body = torch::nn::Sequential(conv(in, width, 1), torch::nn::BatchNorm2d(width),
                                   torch::nn::ReLU(), conv(width, width, 3, stride),
                                   torch::nn::BatchNorm2d(width), torch::nn::ReLU(),
                                   conv(width, out, 1), torch::nn::BatchNorm2d(out));
    } else {
      body = torch::nn::Sequential(conv(in, width, 3, stride), torch::nn::BatchNorm2d(width),
                                   torch::nn::ReLU(), conv(width, out, 3),
                                   torch::nn::BatchNorm2d(out));
    }
    register_module("body", body);
    if (stride != 1 || in != out) {
      shortcut = torch::nn::Sequential(
          torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
          torch::nn::BatchNorm2d(out));
      register_module("shortcut", shortcut);
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    auto identity = shortcut ? shortcut->forward(x) : x;
    return torch::relu(body->forward(x) + identity);
  }

  torch::nn::Sequential body{nullptr}, shortcut{nullptr};
};
TORCH_MODULE(Block);

}  // namespace

torch::nn::Sequential makeResNet(const std::string& name, int64_t numClasses) {
  bool bottleneck;
  std::vector<int> layers;
  if (name == "resnet18") {
    bottleneck = false;
    layers = {2, 2, 2, 2};
  } else if (name == "resnet50") {
    bottleneck = true;
    layers = {3, 4, 6, 3};
  } else {
    throw std::invalid_argument("unknown model '" + name + "' (use resnet18 or resnet50)");
  }
  torch::nn::Sequential net(
      torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)),
      torch::nn::BatchNorm2d(64), torch::nn::ReLU(),
      torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2).padding(1)));
  int64_t in = 64;
  const int64_t widths[] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    for (int b = 0; b < layers[stage]; ++b) {
      int64_t stride = (b == 0 && stage > 0) ? 2 : 1;
      net->push_back(Block(in, widths[stage], stride, bottleneck));
      in = bottleneck ? widths[stage] * 4 : widths[stage];
    }
  }
  net->push_back(torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions(1)));
  net->push_back(torch::nn::Flatten());
  net->push_back(torch::nn::Linear(in, numClasses));
  return net;
}
