// Host cost per gradient in C++: the model of host_cost.py (161 parameters
// of 4 values, one multiply and one sum each) trained with plain LibTorch and
// through kolo::torch::DistributedOptimizer, taking turns in blocks of
// --steps steps in one process. Run alone (world size 1) or under kolorun;
// rank 0 prints one line "HOST_COST {json}" with the median ms per step of
// each mode. benchmarks/host_cost/host_cost.py drives it.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kolo/torch.h"

namespace {

constexpr int kParams = 161;
constexpr int kNumel = 4;

struct Tiny : ::torch::nn::Module {
  Tiny() {
    for (int i = 0; i < kParams; ++i) {
      ps.push_back(register_parameter("p" + std::to_string(i),
                                      ::torch::full({kNumel}, 0.01 * (i + 1))));
    }
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor total;
    for (const auto& p : ps) {
      at::Tensor term = (p * x).sum();
      total = total.defined() ? total + term : term;
    }
    return total;
  }
  std::vector<at::Tensor> ps;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"host cost per gradient, LibTorch: plain vs kolo DistributedOptimizer"};
  int steps = 10, warmup = 30, blocks = 20;
  app.add_option("--steps", steps, "steps per block");
  app.add_option("--warmup", warmup, "untimed steps per mode first");
  app.add_option("--blocks", blocks, "timed blocks per mode");
  CLI11_PARSE(app, argc, argv);

  at::set_num_threads(1);
  kolo::init();
  const at::Tensor x = ::torch::ones({kNumel});

  struct Mode {
    std::string name;
    std::shared_ptr<Tiny> model;
    std::shared_ptr<::torch::optim::SGD> sgd;
    std::unique_ptr<kolo::torch::DistributedOptimizer> kolo;
  };
  std::vector<Mode> modes(2);
  for (size_t m = 0; m < modes.size(); ++m) {
    Mode& mode = modes[m];
    mode.name = m == 0 ? "plain" : "kolo";
    mode.model = std::make_shared<Tiny>();
    mode.sgd = std::make_shared<::torch::optim::SGD>(mode.model->parameters(),
                                                     ::torch::optim::SGDOptions(1e-3));
    if (m == 1) {
      mode.kolo = std::make_unique<kolo::torch::DistributedOptimizer>(
          mode.sgd, mode.model->named_parameters());
    }
  }
  auto run = [&](Mode& mode, int n) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      if (mode.kolo) {
        mode.kolo->zero_grad();
        mode.model->forward(x).backward();
        mode.kolo->step();
      } else {
        mode.sgd->zero_grad();
        mode.model->forward(x).backward();
        mode.sgd->step();
      }
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
               .count() / n;
  };
  for (auto& mode : modes) run(mode, warmup);
  std::map<std::string, std::vector<double>> times;
  for (int b = 0; b < blocks; ++b) {
    for (auto& mode : modes) {
      kolo::torch::barrier();
      times[mode.name].push_back(run(mode, steps));
    }
  }
  kolo::torch::barrier();
  if (kolo::rank() == 0) {
    std::string json = "{\"lang\": \"cpp\", \"size\": " + std::to_string(kolo::size()) +
                       ", \"torch\": \"" + TORCH_VERSION + "\", \"step_ms\": {";
    bool first = true;
    for (const auto& mode : modes) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.4f", median(times[mode.name]));
      json += std::string(first ? "" : ", ") + "\"" + mode.name + "\": " + buf;
      first = false;
    }
    std::printf("HOST_COST %s}}\n", json.c_str());
    std::fflush(stdout);
  }
  modes.clear();
  kolo::shutdown();
  return 0;
}
