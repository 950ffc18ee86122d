// ResNet-18 (basic blocks) and ResNet-50 (bottleneck blocks) in LibTorch,
// used by the synthetic benchmark and by the fusion benchmark to generate
// real gradient shapes.
#pragma once

#include <string>

#include <torch/torch.h>

// Builds "resnet18" or "resnet50" with num_classes outputs; throws on other names.
torch::nn::Sequential makeResNet(const std::string& name, int64_t numClasses = 1000);
