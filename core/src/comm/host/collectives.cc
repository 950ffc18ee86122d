#include "comm/host/collectives.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "kernels/reduce.h"

namespace kolo::comm::host {

Collectives::Collectives(const comm::BackendArgs& args,
                         std::shared_ptr<comm::cuda::DeviceSet> devices,
                         std::shared_ptr<HostRuntime> runtime)
    : timeout_(args.config.timeout),
      rank_(args.identity.rank),
      size_(args.identity.size),
      store_(args.store),
      broadcast_(args.broadcast),
      devices_(std::move(devices)),
      runtime_(std::move(runtime)) {
  KOLO_CHECK_ARG(devices_ != nullptr && runtime_ != nullptr, "host collectives: no devices");
}

void Collectives::connect() {
  // As NCCL's unique id: rank 0 names the clique, the others learn it.
  std::vector<char> bytes(sizeof(uint64_t));
  if (rank_ == 0) {
    const uint64_t id = runtime_->newCliqueId();
    std::memcpy(bytes.data(), &id, sizeof(id));
  }
  if (broadcast_) {
    broadcast_(bytes, 0);
  } else if (rank_ == 0) {
    store_->set("host/clique-id", bytes);
  } else {
    bytes = store_->get("host/clique-id", timeout_);
  }
  KOLO_ENFORCE(bytes.size() == sizeof(uint64_t), "host collectives: bad clique id");
  uint64_t id = 0;
  std::memcpy(&id, bytes.data(), sizeof(id));
  std::shared_ptr<Clique> clique = runtime_->clique(id, size_);
  std::lock_guard<std::mutex> lock(state_->mu);
  clique_ = std::move(clique);
}

void Collectives::launch(const char* what, const void* a, const void* b, Clique::Part part,
                         size_t outBytes, Clique::Compute compute) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->failure.ok()) {
      throw PeerFailure(std::string("host ") + what +
                        " failed: backend unusable after an earlier failure: " +
                        state_->failure.message);
    }
  }
  int device = device_;
  for (const void* p : {a, b}) {
    if (p == nullptr) continue;
    const int d = runtime_->ownerOf(p);
    KOLO_CHECK_ARG(d >= 0, std::string("host ") + what + ": buffer is not device memory");
    KOLO_CHECK_ARG(device < 0 || d == device, std::string("host ") + what +
                                                  ": buffers on devices " +
                                                  std::to_string(device) + " and " +
                                                  std::to_string(d));
    device = d;
  }
  KOLO_CHECK_ARG(device >= 0, std::string("host ") + what + ": no device buffer");
  if (!clique_) connect();  // this thread is the only writer of clique_
  device_ = device;
  comm::cuda::DeviceContext& ctx = devices_->at(device);
  runtime_->launch(ctx.stream(), HostRuntime::Stage::kCollective,
                   [clique = clique_, state = state_, rank = rank_, device, part, outBytes,
                    compute = std::move(compute), timeout = timeout_, what] {
                     {
                       std::lock_guard<std::mutex> lock(state->mu);
                       if (!state->failure.ok()) return;  // aborted: ends at once
                     }
                     const Status s = clique->run(rank, device, part, outBytes, compute, timeout);
                     if (s.ok()) return;
                     std::lock_guard<std::mutex> lock(state->mu);
                     if (state->failure.ok()) {
                       state->failure =
                           Status{s.code, std::string("host ") + what + " failed: " + s.message};
                     }
                   });
}

void Collectives::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  const size_t bytes = count * elementSize(dtype);
  launch("allreduce", buf, nullptr, {buf, buf}, bytes,
         [count, dtype, op, bytes](const std::vector<Clique::Part>& parts,
                                   std::vector<char>& out) {
           if (bytes == 0) return;
           std::memcpy(out.data(), parts[0].in, bytes);
           for (size_t r = 1; r < parts.size(); ++r) {
             reduceElements(out.data(), out.data(), parts[r].in, count, dtype, op);
           }
         });
}

void Collectives::broadcast(void* buf, size_t count, DataType dtype, int root) {
  const size_t bytes = count * elementSize(dtype);
  launch("broadcast", buf, nullptr, {buf, buf}, bytes,
         [root, bytes](const std::vector<Clique::Part>& parts, std::vector<char>& out) {
           if (bytes > 0) std::memcpy(out.data(), parts[static_cast<size_t>(root)].in, bytes);
         });
}

void Collectives::allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                             DataType dtype) {
  const size_t es = elementSize(dtype);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0)) * es;
  launch("allgatherv", in, out, {in, out}, total,
         [counts, es](const std::vector<Clique::Part>& parts, std::vector<char>& result) {
           size_t at = 0;
           for (size_t r = 0; r < parts.size(); ++r) {
             if (counts[r] > 0) std::memcpy(result.data() + at, parts[r].in, counts[r] * es);
             at += counts[r] * es;
           }
         });
}

void Collectives::alltoallv(const void* in, const std::vector<size_t>& sendCounts, void* out,
                            const std::vector<size_t>& recvCounts, DataType dtype) {
  const size_t es = elementSize(dtype);
  const size_t total = std::accumulate(recvCounts.begin(), recvCounts.end(), size_t(0)) * es;
  // Every member's send counts travel with its part: the block for rank r
  // starts after the blocks for ranks before it.
  auto sends = std::make_shared<std::vector<size_t>>(sendCounts);
  struct In {
    const void* data;
    std::shared_ptr<std::vector<size_t>> counts;
  };
  auto mine = std::make_shared<In>(In{in, sends});
  launch("alltoallv", in, out, {mine.get(), out}, total,
         [mine, rank = rank_, es](const std::vector<Clique::Part>& parts,
                                  std::vector<char>& result) {
           size_t at = 0;
           for (const Clique::Part& p : parts) {
             const In& from = *static_cast<const In*>(p.in);
             size_t offset = 0;
             for (int r = 0; r < rank; ++r) offset += (*from.counts)[static_cast<size_t>(r)];
             const size_t n = (*from.counts)[static_cast<size_t>(rank)] * es;
             if (n > 0) {
               std::memcpy(result.data() + at, static_cast<const char*>(from.data) + offset * es,
                           n);
             }
             at += n;
           }
         });
}

void Collectives::reducescatter(const void* in, void* out, const std::vector<size_t>& recvCounts,
                                DataType dtype, ReduceOp op) {
  const size_t es = elementSize(dtype);
  size_t offset = 0;
  for (int r = 0; r < rank_; ++r) offset += recvCounts[static_cast<size_t>(r)];
  const size_t n = recvCounts[static_cast<size_t>(rank_)];
  launch("reducescatter", in, out, {in, out}, n * es,
         [offset, n, es, dtype, op](const std::vector<Clique::Part>& parts,
                                    std::vector<char>& result) {
           if (n == 0) return;
           std::memcpy(result.data(), static_cast<const char*>(parts[0].in) + offset * es, n * es);
           for (size_t r = 1; r < parts.size(); ++r) {
             reduceElements(result.data(), result.data(),
                            static_cast<const char*>(parts[r].in) + offset * es, n, dtype, op);
           }
         });
}

Status Collectives::asyncError() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->failure;
}

void Collectives::abortAsync() {
  abortWith(Status{ErrorCode::kPeerFailure, "communicator aborted"});
}

void Collectives::abortWith(const Status& why) {
  const std::string text = "rank " + std::to_string(rank_) + " aborted: " + why.message;
  std::shared_ptr<Clique> clique;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->failure.ok()) state_->failure = Status{ErrorCode::kPeerFailure, text};
    clique = clique_;
  }
  if (clique) clique->abort(text);
}

}  // namespace kolo::comm::host
