#include "bert_base.h"

#include <string>

namespace {

constexpr int64_t kVocab = 30522;
constexpr int64_t kPositions = 512;
constexpr int64_t kTokenTypes = 2;
constexpr int64_t kHidden = 768;
constexpr int64_t kFfn = 3072;
constexpr int kLayers = 12;

torch::nn::LayerNorm layerNorm() {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({kHidden}).eps(1e-12));
}

struct EmbeddingsImpl : torch::nn::Module {
  EmbeddingsImpl() {
    register_module("word", torch::nn::Embedding(kVocab, kHidden));
    register_module("position", torch::nn::Embedding(kPositions, kHidden));
    register_module("token_type", torch::nn::Embedding(kTokenTypes, kHidden));
    register_module("norm", layerNorm());
  }
};
TORCH_MODULE(Embeddings);

struct LayerImpl : torch::nn::Module {
  LayerImpl() {
    for (const char* name : {"query", "key", "value", "attention_out"}) {
      register_module(name, torch::nn::Linear(kHidden, kHidden));
    }
    register_module("attention_norm", layerNorm());
    register_module("intermediate", torch::nn::Linear(kHidden, kFfn));
    register_module("output", torch::nn::Linear(kFfn, kHidden));
    register_module("output_norm", layerNorm());
  }
};
TORCH_MODULE(Layer);

}  // namespace

std::shared_ptr<torch::nn::Module> makeBertBase() {
  auto bert = std::make_shared<torch::nn::Module>("BertBase");
  bert->register_module("embeddings", Embeddings());
  for (int i = 0; i < kLayers; ++i) bert->register_module("layer" + std::to_string(i), Layer());
  bert->register_module("pooler", torch::nn::Linear(kHidden, kHidden));
  return bert;
}
