// Multi-process training check, run under kolorun (and kolorun --mpi):
// every rank trains k SGD/Adam steps on its own shard of a fixed data set,
// then checks that
//   1. parameters are bitwise identical on all ranks (allgather), and
//   2. they match single-process training on the whole batch (computed
//      locally on every rank from the same seed) within float tolerance.
// Prints "EQUIVALENT" and exits 0, or prints what differed and exits 1.
#include <cstdio>
#include <string>

#include <kolo/torch.h>

namespace kt = kolo::torch;

namespace {

torch::nn::Sequential makeModel() {
  torch::manual_seed(11);
  return torch::nn::Sequential(torch::nn::Linear(6, 16), torch::nn::Tanh(),
                               torch::nn::Linear(16, 3));
}

std::shared_ptr<torch::optim::Optimizer> makeOptimizer(const std::string& kind,
                                                       const std::vector<at::Tensor>& params) {
  if (kind == "adam") return std::make_shared<torch::optim::Adam>(params, 0.01);
  return std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
}

at::Tensor flatParams(torch::nn::Sequential& model) {
  std::vector<at::Tensor> flat;
  for (auto& p : model->parameters()) flat.push_back(p.detach().reshape({-1}));
  return torch::cat(flat);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string kind = argc > 1 ? argv[1] : "sgd";
  const int steps = 5;
  const int64_t perRank = 8;
  torch::set_num_threads(1);
  kt::init();
  const int rank = kt::rank(), size = kt::size();

  torch::manual_seed(3);
  auto x = torch::randn({perRank * size * steps, 6}, torch::kFloat64);
  auto y = torch::randn({perRank * size * steps, 3}, torch::kFloat64);

  // Distributed: rank r takes rows [r*B, (r+1)*B) of each step's batch.
  auto model = makeModel();
  model->to(torch::kFloat64);
  kt::broadcast_parameters(*model, 0);
  auto inner = makeOptimizer(kind, model->parameters());
  kt::DistributedOptimizer opt(inner, model->named_parameters());
  for (int s = 0; s < steps; ++s) {
    const int64_t base = s * perRank * size + rank * perRank;
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward(x.slice(0, base, base + perRank)),
                                y.slice(0, base, base + perRank));
    loss.backward();
    opt.step();
  }

  // Reference: one process, the whole batch of every step.
  auto ref = makeModel();
  ref->to(torch::kFloat64);
  auto refOpt = makeOptimizer(kind, ref->parameters());
  for (int s = 0; s < steps; ++s) {
    const int64_t base = s * perRank * size;
    refOpt->zero_grad();
    auto loss = torch::mse_loss(ref->forward(x.slice(0, base, base + perRank * size)),
                                y.slice(0, base, base + perRank * size));
    loss.backward();
    refOpt->step();
  }

  auto mine = flatParams(model);
  auto all = kt::allgather(mine.unsqueeze(0), "params.all");
  bool identical = true;
  for (int r = 0; r < size; ++r) identical = identical && torch::equal(all[r], mine);
  const double diff = (mine - flatParams(ref)).abs().max().item<double>();
  const bool equivalent = diff < 1e-8;
  std::printf("rank %d/%d %s: identical across ranks %s, max |distributed - single| = %.3g\n",
              rank, size, kind.c_str(), identical ? "yes" : "NO", diff);
  if (identical && equivalent) std::printf("EQUIVALENT\n");
  kt::shutdown();
  return identical && equivalent ? 0 : 1;
}
