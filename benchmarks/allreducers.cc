#include "gloo_store.h"
#include "allreducers.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <stdexcept>

#include "common.h"
#include "kolo/tcp_store.h"

namespace kolo::bench {
namespace {

constexpr size_t kPieceBytes = size_t(1) << 20;
constexpr std::chrono::seconds kTimeout{120};

class RawMpi final : public Allreducer {
 public:
  explicit RawMpi(size_t pieceBytes) : piece_(pieceBytes / sizeof(float)) {}

  void allreduce(const std::vector<Tensor>& tensors) override {
    for (const auto& t : tensors) {
      const size_t piece = piece_ > 0 ? piece_ : std::max<size_t>(t.count, 1);
      for (size_t done = 0; done < t.count; done += piece) {
        const size_t n = std::min(piece, t.count - done);
        if (n > INT_MAX) throw std::invalid_argument("tensor too large for one MPI call");
        MPI_Allreduce(MPI_IN_PLACE, t.data + done, static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      }
    }
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

 private:
  size_t piece_;  // floats per call; 0 = whole tensor
};


class RawGloo final : public Allreducer {
 public:
  explicit RawGloo(MpiJob& job) {
    auto store = job.freshStore();
    ::gloo::transport::tcp::attr attr;
    // The interface kolo's gloo backend would use: the one that reaches the store.
    attr.hostname = kolo::localAddressOf(*store);
    if (attr.hostname.empty()) attr.hostname = "127.0.0.1";
    auto device = ::gloo::transport::tcp::CreateDevice(attr);
    context_ = std::make_shared<::gloo::rendezvous::Context>(job.rank(), job.size());
    context_->setTimeout(kTimeout);
    GlooStore glooStore(store, kTimeout);
    context_->connectFullMesh(glooStore, device);
    // As kolo does: nobody may close a connection before every rank has
    // accepted its own (gloo aborts on a reset before the accept).
    ::gloo::BarrierOptions barrier(context_);
    barrier.setTag(tag_++);
    ::gloo::barrier(barrier);
  }
  ~RawGloo() override {
    ::gloo::BarrierOptions barrier(context_);
    barrier.setTag(tag_++);
    ::gloo::barrier(barrier);
  }

  void allreduce(const std::vector<Tensor>& tensors) override {
    for (const auto& t : tensors) {
      if (t.count == 0) continue;
      ::gloo::AllreduceOptions opts(context_);
      opts.setOutput(t.data, t.count);
      opts.setReduceFunction(sumFloats);
      opts.setTag(tag_++);
      ::gloo::allreduce(opts);
    }
  }
  // No engine is alive while a raw method runs, so MPI may line ranks up.
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

 private:
  std::shared_ptr<::gloo::rendezvous::Context> context_;
  uint32_t tag_ = 0;  // one per collective, as kolo's backend hands them out
};

class Kolo final : public Allreducer {
 public:
  Kolo(const std::string& backend, MpiJob& job)
      : engine_(engineConfig(backend), job.identity(),
                // On MPI each process keeps its own bookkeeping keys.
                backend == "mpi" ? kolo::makeHashStore() : job.freshStore()) {}
  ~Kolo() override { engine_.shutdown(); }

  void allreduce(const std::vector<Tensor>& tensors) override {
    handles_.clear();
    for (const auto& t : tensors) {
      kolo::Request q;
      q.name = t.name;
      q.dtype = kolo::DataType::kFloat32;
      q.shape = t.shape;
      handles_.push_back(engine_.enqueue(std::move(q), kolo::Entry{t.data, t.data, {}, {}}));
    }
    for (const auto& h : handles_) h.wait();
  }
  void barrier() override { engine_.barrier().wait(); }

  kolo::EngineStats stats() const { return engine_.stats(); }

 private:
  kolo::Engine engine_;
  std::vector<kolo::Handle> handles_;
};

}  // namespace

const std::vector<std::string>& allreducerNames() {
  static const std::vector<std::string> names{"mpi",      "mpi-1MiB-pieces", "gloo",
                                              "kolo-mpi", "kolo-gloo",       "kolo-shm"};
  return names;
}

std::unique_ptr<Allreducer> makeAllreducer(const std::string& method, MpiJob& job) {
  if (method == "mpi") return std::make_unique<RawMpi>(0);
  if (method == "mpi-1MiB-pieces") return std::make_unique<RawMpi>(kPieceBytes);
  if (method == "gloo") return std::make_unique<RawGloo>(job);
  if (method == "kolo-mpi") return std::make_unique<Kolo>("mpi", job);
  if (method == "kolo-gloo") return std::make_unique<Kolo>("gloo", job);
  if (method == "kolo-shm") return std::make_unique<Kolo>("shm", job);
  throw std::invalid_argument("unknown allreduce method '" + method + "'");
}

int agreeOnCalls(Allreducer& ar, int worldSize, double secondsPerCall, double budgetSeconds,
                 int least, int most) {
  float sum = static_cast<float>(secondsPerCall);
  ar.allreduce({{"bench.agree", {1}, &sum, 1}});
  // An allreduce leaves the same sum on every rank, so all compute the same count.
  const double mean = std::max(double(sum), 1e-9) / worldSize;
  return static_cast<int>(std::clamp(budgetSeconds / mean, double(least), double(most)));
}

kolo::EngineStats statsOf(const Allreducer& a) {
  const auto* k = dynamic_cast<const Kolo*>(&a);
  return k ? k->stats() : kolo::EngineStats{};
}

}  // namespace kolo::bench
