// An elastic LibTorch training job for the elastic tests: an MLP on the first
// --samples Fashion-MNIST training images, data from ElasticSampler, state in
// a TorchState, under kolo::elastic::run. It prints what the tests check:
//
//   START worker=<id> pid=<pid> host=<KOLO_HOSTNAME>
//   WORLD v=<world> worker=<id> rank=<r> size=<n> epoch=<e> batch=<b> processed=<p> t=<ms>
//   BATCH v=<world> rank=<r> epoch=<e> batch=<b> idx=<i,i,...>      before a step
//   STEP v=<world> worker=<id> rank=<r> epoch=<e> batch=<b> t=<ms>   after it
//   COMMIT v=<world> worker=<id> epoch=<e> batch=<b> processed=<p>
//   RESET worker=<id> reason=<why>
//   DONE worker=<id> rank=<r> world=<v> epochs=<e> checksum=<hex>
//
// t is wall-clock milliseconds (CLOCK_REALTIME), comparable across processes.
// --crash-on-host H --crash-after-steps K: workers on host H exit with code 3
// after K steps in a world (a host that keeps failing). --tag T only marks
// the process (tests find their processes by it). --stop-file F: training
// ends after the epoch in which F appeared (rank 0 looks, everyone follows).
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <kolo/torch.h>
#include <kolo/torch/elastic.h>

namespace kt = kolo::torch;
namespace ke = kolo::elastic;

namespace {

struct Args {
  std::string data;
  int epochs = 3;
  int64_t samples = 768;
  int64_t batch = 8;
  int64_t commitEvery = 4;
  int stepSleepMs = 20;
  double lr = 0.05;
  std::string crashOnHost;
  int crashAfterSteps = 3;
  std::string stopFile;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "elastic_worker: %s needs a value\n", k.c_str());
      std::exit(2);
    }
    std::string v = argv[++i];
    if (k == "--data") a.data = v;
    else if (k == "--epochs") a.epochs = std::stoi(v);
    else if (k == "--samples") a.samples = std::stoll(v);
    else if (k == "--batch") a.batch = std::stoll(v);
    else if (k == "--commit-every") a.commitEvery = std::stoll(v);
    else if (k == "--step-sleep-ms") a.stepSleepMs = std::stoi(v);
    else if (k == "--lr") a.lr = std::stod(v);
    else if (k == "--crash-on-host") a.crashOnHost = v;
    else if (k == "--crash-after-steps") a.crashAfterSteps = std::stoi(v);
    else if (k == "--stop-file") a.stopFile = v;
    else if (k == "--tag") continue;  // marks the test's processes
    else {
      std::fprintf(stderr, "elastic_worker: unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

long long nowMs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 32))),
        fc2(register_module("fc2", torch::nn::Linear(32, 10))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

std::string checksum(torch::nn::Module& model) {
  // FNV-1a over the bytes of every parameter: equal only if bitwise equal.
  uint64_t h = 1469598103934665603ULL;
  for (const auto& p : model.parameters()) {
    auto t = p.detach().contiguous();
    const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel() * static_cast<int64_t>(t.element_size()); ++i) {
      h = (h ^ bytes[i]) * 1099511628211ULL;
    }
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h));
  return text;
}

void setLr(torch::optim::SGD& sgd, double lr) {
  for (auto& group : sgd.param_groups()) {
    static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  torch::set_num_threads(1);
  const char* hostEnv = std::getenv("KOLO_HOSTNAME");
  const std::string host = hostEnv != nullptr ? hostEnv : "?";

  auto mnist = torch::data::datasets::MNIST(args.data, torch::data::datasets::MNIST::Mode::kTrain);
  torch::Tensor images = mnist.images().slice(0, 0, args.samples).reshape({args.samples, 784});
  images = (images - 0.2860) / 0.3530;
  torch::Tensor labels = mnist.targets().slice(0, 0, args.samples);

  kt::init();
  std::printf("START worker=%lld pid=%d host=%s\n", static_cast<long long>(ke::worker_id()),
              static_cast<int>(getpid()), host.c_str());
  std::fflush(stdout);

  torch::manual_seed(7);
  Net model;
  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(args.lr * kt::size()));
  kt::DistributedOptimizer optimizer(sgd, model->named_parameters());
  ke::ElasticSampler sampler(args.samples, /*shuffle=*/true, /*seed=*/1);
  kt::elastic::TorchState state(*model, optimizer, {{"epoch", 0}, {"batch", 0}});
  state.track("sampler", sampler);
  const long long worker = ke::worker_id();
  state.register_reset_callbacks({[&] {
    setLr(*sgd, args.lr * kt::size());
    std::printf("RESET worker=%lld size=%d\n", worker, kt::size());
    std::fflush(stdout);
  }});

  ke::run(state, [&] {
    const long long v = ke::world_version();
    const int rank = kt::rank();
    std::printf("WORLD v=%lld worker=%lld rank=%d size=%d epoch=%lld batch=%lld processed=%lld "
                "t=%lld\n",
                v, worker, rank, kt::size(), static_cast<long long>(state["epoch"]),
                static_cast<long long>(state["batch"]),
                static_cast<long long>(sampler.processed_num()), nowMs());
    std::fflush(stdout);
    int stepsInWorld = 0;
    while (state["epoch"] < args.epochs) {
      const int64_t batches = (sampler.num_samples() + args.batch - 1) / args.batch;
      for (int64_t b = 0; b < batches; ++b) {
        std::vector<int64_t> idx = sampler.get_indices(b, args.batch);
        std::string list;
        for (int64_t i : idx) list += (list.empty() ? "" : ",") + std::to_string(i);
        std::printf("BATCH v=%lld rank=%d epoch=%lld batch=%lld idx=%s\n", v, rank,
                    static_cast<long long>(state["epoch"]), static_cast<long long>(state["batch"]),
                    list.c_str());
        std::fflush(stdout);
        auto which = torch::tensor(idx, torch::kInt64);
        optimizer.zero_grad();
        auto loss = torch::nn::functional::cross_entropy(model->forward(images.index_select(0, which)),
                                                         labels.index_select(0, which));
        loss.backward();
        optimizer.step();
        sampler.record_batch(b, args.batch);
        std::printf("STEP v=%lld worker=%lld rank=%d epoch=%lld batch=%lld t=%lld\n", v, worker,
                    rank, static_cast<long long>(state["epoch"]),
                    static_cast<long long>(state["batch"]), nowMs());
        std::fflush(stdout);
        ++state["batch"];
        ++stepsInWorld;
        if (!args.crashOnHost.empty() && host == args.crashOnHost &&
            stepsInWorld >= args.crashAfterSteps) {
          std::printf("CRASH worker=%lld host=%s\n", worker, host.c_str());
          std::fflush(stdout);
          std::_Exit(3);
        }
        if (args.stepSleepMs > 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(args.stepSleepMs));
        }
        if (state["batch"] % args.commitEvery == 0) {
          std::printf("COMMIT v=%lld worker=%lld epoch=%lld batch=%lld processed=%lld\n", v,
                      worker, static_cast<long long>(state["epoch"]),
                      static_cast<long long>(state["batch"]),
                      static_cast<long long>(sampler.processed_num()));
          std::fflush(stdout);
          state.commit();
        }
      }
      // The epoch's end: counters and the sampler move on together, then commit.
      state["epoch"] += 1;
      state["batch"] = 0;
      sampler.set_epoch(state["epoch"]);
      std::printf("COMMIT v=%lld worker=%lld epoch=%lld batch=0 processed=0\n", v, worker,
                  static_cast<long long>(state["epoch"]));
      std::fflush(stdout);
      state.commit();
      if (!args.stopFile.empty()) {
        int64_t stop = kt::rank() == 0 && access(args.stopFile.c_str(), F_OK) == 0;
        stop = kt::allreduce(torch::tensor({stop}), kt::Max, "stop").item<int64_t>();
        if (stop != 0) args.epochs = static_cast<int>(state["epoch"]);
      }
    }
  });
  std::printf("DONE worker=%lld rank=%d world=%lld epochs=%lld checksum=%s\n", worker, kt::rank(),
              static_cast<long long>(ke::world_version()), static_cast<long long>(state["epoch"]),
              checksum(*model).c_str());
  std::fflush(stdout);
  kt::shutdown();
  return 0;
}
