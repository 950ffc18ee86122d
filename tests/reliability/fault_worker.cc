// A small data-parallel LibTorch training job for the fault-injection tests
// (process_fault_test.cc, network_fault_test.cc). Run it under kolorun:
//
//   fault_worker [--fault none|kill|stop|throw-in-hook|exit-early]
//                [--fault-rank R] [--fault-step S] [--fault-time-file PATH]
//                [--steps N] [--width W] [--abort-on-error]
//                [--print-every K] [--max-seconds T] [--marker TOKEN]
//
// Every rank trains an MLP on its own synthetic data through
// kolo::torch::DistributedOptimizer. At step S, rank R injects the fault:
//   kill           raise(SIGKILL) from a gradient hook on the first layer,
//                  i.e. mid-backward, after the later layers' gradient
//                  allreduces were enqueued;
//   stop           raise(SIGSTOP) at the same place: a silent peer;
//   throw-in-hook  that hook throws std::runtime_error; the exception leaves
//                  backward() and main() like in a program that does not
//                  catch it (std::terminate), or, with --abort-on-error, main
//                  catches it and calls kolo::defaultEngine().abort(what());
//   exit-early     calls kolo::shutdown() and returns 0 from main at the
//                  start of step S while the others keep submitting.
// Just before the fault it writes CLOCK_REALTIME in milliseconds to PATH
// (written to PATH.tmp, then renamed) and prints "FAULT rank=R ...".
//
// Output, one line each, on stdout:
//   SURVIVOR rank=<r> detected_after_ms=<ms> error=<what()>
//       a rank whose training failed; ms from the fault time in PATH (-1
//       when PATH was not written); exits 1 after kolo::shutdown().
//   DONE rank=<r> steps=<n> checksum=<16 hex digits>
//       training finished (--steps N, fault none); the checksum is FNV-1a
//       over the parameters' bytes, so equal ranks print equal checksums.
//   STEP rank=<r> step=<n>
//       every K steps with --print-every K (tests wait for it).
//   NO_ERROR rank=<r> after <t> s
//       --max-seconds passed without an error (a hang); exits 3.
//
// SIGTERM is recorded and otherwise ignored, so that a survivor still gets
// to report its own error when kolorun stops the job because the faulty
// rank already exited; kolorun's SIGKILL after --grace-seconds still ends it.
// --marker is not read: it tags the command line so tests can find strays.
#include <time.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <kolo/torch.h>

namespace kt = kolo::torch;

namespace {

enum class Fault { kNone, kKill, kStop, kThrowInHook, kExitEarly };

struct Options {
  Fault fault = Fault::kNone;
  int faultRank = 1;
  int faultStep = 10;
  std::string faultTimeFile;
  int steps = 0;  // 0: until an error (or --max-seconds)
  int width = 64;
  bool abortOnError = false;
  int printEvery = 0;
  double maxSeconds = 120;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "fault_worker: %s\nusage: fault_worker [--fault none|kill|stop|throw-in-hook|"
               "exit-early] [--fault-rank R] [--fault-step S] [--fault-time-file PATH] "
               "[--steps N] [--width W] [--abort-on-error] [--print-every K] [--max-seconds T] "
               "[--marker TOKEN]\n",
               why.c_str());
  std::exit(2);
}

Fault parseFault(const std::string& s) {
  if (s == "none") return Fault::kNone;
  if (s == "kill") return Fault::kKill;
  if (s == "stop") return Fault::kStop;
  if (s == "throw-in-hook") return Fault::kThrowInHook;
  if (s == "exit-early") return Fault::kExitEarly;
  usage("unknown fault '" + s + "'");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--fault")
      o.fault = parseFault(value());
    else if (a == "--fault-rank")
      o.faultRank = std::stoi(value());
    else if (a == "--fault-step")
      o.faultStep = std::stoi(value());
    else if (a == "--fault-time-file")
      o.faultTimeFile = value();
    else if (a == "--steps")
      o.steps = std::stoi(value());
    else if (a == "--width")
      o.width = std::stoi(value());
    else if (a == "--abort-on-error")
      o.abortOnError = true;
    else if (a == "--print-every")
      o.printEvery = std::stoi(value());
    else if (a == "--max-seconds")
      o.maxSeconds = std::stod(value());
    else if (a == "--marker")
      value();
    else
      usage("unknown argument '" + a + "'");
  }
  return o;
}

int64_t realtimeMs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void writeFaultTime(const std::string& path) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fprintf(f, "%lld\n", static_cast<long long>(realtimeMs()));
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
}

int64_t readFaultTime(const std::string& path) {
  long long ms = -1;
  if (path.empty()) return -1;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    if (std::fscanf(f, "%lld", &ms) != 1) ms = -1;
    std::fclose(f);
  }
  return ms;
}

// One line: kolorun prefixes each output line with the rank.
std::string oneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

volatile sig_atomic_t gotSigterm = 0;
void onSigterm(int) { gotSigterm = 1; }

uint64_t checksum(const torch::nn::Module& model) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const auto& p : model.parameters()) {
    at::Tensor t = p.detach().contiguous();
    const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

// Set by the hook right before it throws, so main can tell this rank's own
// injected error from a peer's.
bool injectedThrow = false;

}  // namespace

// throw-in-hook without --abort-on-error lets the exception escape on purpose.
int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape)
  const Options opt = parse(argc, argv);
  std::signal(SIGTERM, onSigterm);
  torch::set_num_threads(1);
  kt::init();
  const int rank = kt::rank();
  const bool faulty = opt.fault != Fault::kNone && rank == opt.faultRank;

  // Different initial weights per rank: broadcast_parameters must fix that.
  torch::manual_seed(100 + rank);
  const int64_t in = 32, out = 8, batch = 16;
  torch::nn::Sequential model(torch::nn::Linear(in, opt.width), torch::nn::ReLU(),
                              torch::nn::Linear(opt.width, opt.width), torch::nn::ReLU(),
                              torch::nn::Linear(opt.width, out));
  kt::broadcast_parameters(*model, 0);
  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(0.01).momentum(0.9));
  kt::DistributedOptimizer dopt(sgd, model->named_parameters());

  int step = 0;
  // The first layer's weight gets its gradient last in backward: by then
  // the allreduces of the later layers are already enqueued.
  at::Tensor first = model->parameters().front();
  first.register_hook([&](const at::Tensor&) {
    if (!faulty || step != opt.faultStep) return;
    if (opt.fault == Fault::kThrowInHook) {
      std::printf("FAULT rank=%d fault=throw-in-hook step=%d\n", rank, step);
      std::fflush(stdout);
      writeFaultTime(opt.faultTimeFile);
      injectedThrow = true;
      throw std::runtime_error("fault_worker: injected error in a gradient hook on rank " +
                               std::to_string(rank) + " at step " + std::to_string(step));
    }
    const bool kill = opt.fault == Fault::kKill;
    if (!kill && opt.fault != Fault::kStop) return;
    std::printf("FAULT rank=%d fault=%s step=%d\n", rank, kill ? "kill" : "stop", step);
    std::fflush(stdout);
    writeFaultTime(opt.faultTimeFile);
    std::raise(kill ? SIGKILL : SIGSTOP);
  });

  const auto start = std::chrono::steady_clock::now();
  try {
    for (; opt.steps == 0 || step < opt.steps; ++step) {
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
          opt.maxSeconds) {
        std::printf("NO_ERROR rank=%d after %g s (step %d)\n", rank, opt.maxSeconds, step);
        std::fflush(stdout);
        std::_Exit(3);
      }
      if (faulty && opt.fault == Fault::kExitEarly && step == opt.faultStep) {
        std::printf("FAULT rank=%d fault=exit-early step=%d\n", rank, step);
        std::fflush(stdout);
        writeFaultTime(opt.faultTimeFile);
        kt::shutdown();
        return 0;
      }
      torch::manual_seed(1000 * rank + step);
      auto x = torch::randn({batch, in});
      auto y = torch::randn({batch, out});
      dopt.zero_grad();
      auto loss = torch::mse_loss(model->forward(x), y);
      loss.backward();
      dopt.step();
      if (opt.printEvery > 0 && step % opt.printEvery == 0) {
        std::printf("STEP rank=%d step=%d\n", rank, step);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    if (injectedThrow) {
      if (!opt.abortOnError) throw;  // like a program that does not catch it
      kolo::defaultEngine().abort(e.what());
      kt::shutdown();
      return 1;
    }
    const int64_t faultMs = readFaultTime(opt.faultTimeFile);
    const int64_t after = faultMs < 0 ? -1 : realtimeMs() - faultMs;
    std::printf("SURVIVOR rank=%d detected_after_ms=%lld error=%s\n", rank,
                static_cast<long long>(after), oneLine(e.what()).c_str());
    if (gotSigterm)
      std::printf("NOTE rank=%d had SIGTERM from the launcher before the error\n", rank);
    std::fflush(stdout);
    kt::shutdown();
    return 1;
  }
  std::printf("DONE rank=%d steps=%d checksum=%016llx\n", rank, step,
              static_cast<unsigned long long>(checksum(*model)));
  std::fflush(stdout);
  kt::shutdown();
  return 0;
}
