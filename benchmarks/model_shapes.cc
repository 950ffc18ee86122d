// Writes the parameter (= gradient) shapes of a model, from its LibTorch
// definition, as the CSV that bench_fusion_sets reads: name,shape,numel with
// shape as 64x3x7x7, in named_parameters() order.
//
//   build/bench/benchmarks/bench_model_shapes --model resnet50|bert-base --out FILE
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "bert_base.h"
#include "common.h"
#include "resnet.h"

int main(int argc, char** argv) {
  std::string model;
  std::string out;
  CLI::App app{"dump a model's parameter shapes as CSV"};
  app.add_option("--model", model, "resnet50 or bert-base")
      ->required()
      ->check(CLI::IsMember({"resnet50", "bert-base"}));
  app.add_option("--out", out, "CSV file to write")->required();
  CLI11_PARSE(app, argc, argv);

  torch::NoGradGuard noGrad;
  std::shared_ptr<torch::nn::Module> net;
  if (model == "resnet50") {
    net = makeResNet("resnet50").ptr();
  } else {
    net = makeBertBase();
  }
  kolo::bench::OutputFile file(nullptr, &std::fclose);
  try {
    file = kolo::bench::openForWriting(out);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
  std::FILE* f = file.get();
  fmt::print(f, "name,shape,numel\n");
  int64_t total = 0;
  const auto params = net->named_parameters();
  for (const auto& p : params) {
    std::string shape;
    for (int64_t d : p.value().sizes()) shape += (shape.empty() ? "" : "x") + std::to_string(d);
    fmt::print(f, "{},{},{}\n", p.key(), shape, p.value().numel());
    total += p.value().numel();
  }
  file.reset();
  fmt::print("{}: {} tensors, {} values -> {}\n", model, params.size(), total, out);
  return 0;
}
