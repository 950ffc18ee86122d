// BERT-base (Devlin et al. 2018: 12 layers, hidden 768, 12 heads, FFN 3072,
// vocabulary 30522, 512 positions, 2 token types) as LibTorch modules, for
// the parameter layout only: the fusion benchmark reads its gradient shapes
// from named_parameters() (199 tensors, 109.5M values). No forward pass.
#pragma once

#include <memory>

#include <torch/torch.h>

std::shared_ptr<torch::nn::Module> makeBertBase();
