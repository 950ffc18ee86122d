#include "c10d_peers.h"

#include <condition_variable>
#include <thread>
#include <utility>
#include <vector>

#include "c10d_call.h"
#include "tensor_util.h"

namespace kolo::torch::detail {

struct PeerLinks::Link {
  std::mutex mu;
  std::unique_ptr<kolo::Engine> engine;  // set once connected
  kolo::Status failed;                   // connecting failed
  bool done = false;                     // connected or failed
  struct Queued {
    kolo::Request request;
    kolo::Entry entry;
    c10::intrusive_ptr<ProcessGroupKolo::WorkKolo> work;
  };
  std::vector<Queued> queued;  // submitted before the engine was up
  std::thread connector;
};

PeerLinks::PeerLinks(const kolo::Config& config, const kolo::Identity& group,
                     std::shared_ptr<kolo::Store> store, std::string label)
    : config_(config), group_(group), store_(std::move(store)), label_(std::move(label)) {}

PeerLinks::~PeerLinks() { shutdown(); }

PeerLinks::Link& PeerLinks::linkTo(int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  KOLO_CHECK_ARG(!stopped_, label_ + ": the process group was shut down");
  auto& link = links_[peer];
  if (!link) {
    link = std::make_unique<Link>();
    Link* raw = link.get();
    raw->connector = std::thread([this, raw, peer] { connect(*raw, peer); });
  }
  return *link;
}

void PeerLinks::connect(Link& link, int peer) {
  const int low = std::min(group_.rank, peer);
  const int high = std::max(group_.rank, peer);
  kolo::Identity pair;
  pair.rank = group_.rank == low ? 0 : 1;
  pair.size = 2;
  // Both on this host when the whole group is; otherwise unknown, and the
  // engine reaches the peer through the address that routes to the store.
  const bool oneHost = group_.localSize == group_.size;
  pair.localRank = oneHost ? pair.rank : 0;
  pair.localSize = oneHost ? 2 : 1;
  pair.crossRank = oneHost ? 0 : pair.rank;
  pair.crossSize = oneHost ? 1 : 2;
  kolo::Config config = config_;
  config.rankNames = {low, high};
  config.timelinePath.clear();
  std::unique_ptr<kolo::Engine> engine;
  kolo::Status failed;
  try {
    engine = std::make_unique<kolo::Engine>(
        config, pair,
        std::make_shared<kolo::PrefixStore>(
            "kolo/p2p/" + std::to_string(low) + "-" + std::to_string(high) + "/", store_));
  } catch (const kolo::Error& e) {
    failed = kolo::Status{e.code(), "connecting ranks " + std::to_string(low) + " and " +
                                        std::to_string(high) + " for send/recv: " + e.what()};
  } catch (const std::exception& e) {
    failed = kolo::Status{kolo::ErrorCode::kInternal, e.what()};
  }
  std::vector<Link::Queued> queued;
  {
    std::lock_guard<std::mutex> lock(link.mu);
    link.engine = std::move(engine);
    link.failed = failed;
    link.done = true;
    queued.swap(link.queued);
  }
  for (auto& q : queued) {
    if (!failed.ok()) {
      q.work->failedToStart(failed);
      continue;
    }
    try {
      q.work->started({link.engine->enqueue(std::move(q.request), std::move(q.entry))});
    } catch (const kolo::Error& e) {
      q.work->failedToStart(kolo::Status{e.code(), e.what()});
    }
  }
}

void PeerLinks::submit(bool sending, int peer, int tag, const at::Tensor& tensor,
                       const c10::intrusive_ptr<ProcessGroupKolo::WorkKolo>& work) {
  const int src = sending ? group_.rank : peer;
  const int dst = sending ? peer : group_.rank;
  uint64_t count;
  {
    std::lock_guard<std::mutex> lock(mu_);
    count = counts_[{src, dst, tag}]++;
  }
  kolo::Request q;
  describeTensor(tensor, "send/recv", q);
  q.op = kolo::OpType::kBroadcast;
  q.root = src < dst ? 0 : 1;  // the sender's rank in the pair
  q.name = label_ + " send " + std::to_string(src) + "->" + std::to_string(dst) + " tag " +
           std::to_string(tag) + " #" + std::to_string(count);
  q.call = "send/recv(src=" + std::to_string(src) + ", dst=" + std::to_string(dst) +
           ", tag=" + std::to_string(tag) + ")";
  kolo::Entry e;
  e.input = tensor.data_ptr();
  e.output = tensor.data_ptr();
  std::shared_ptr<void> ready = compat::recordReady(tensor);
  e.readyEvent = ready.get();
  work->keepReady(std::move(ready));
  work->keep({tensor});
  work->expect(1);
  e.onDone = ProcessGroupKolo::WorkKolo::doneCallback(work);
  Link& link = linkTo(peer);
  std::unique_lock<std::mutex> lock(link.mu);
  if (!link.done) {
    link.queued.push_back({std::move(q), std::move(e), work});
    return;
  }
  if (!link.failed.ok()) {
    lock.unlock();
    work->failedToStart(link.failed);
    return;
  }
  kolo::Engine& engine = *link.engine;
  lock.unlock();
  work->started({engine.enqueue(std::move(q), std::move(e))});
}

void PeerLinks::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [peer, link] : links_) {
    std::lock_guard<std::mutex> linkLock(link->mu);
    if (link->engine) link->engine->abort(why);
  }
}

void PeerLinks::shutdown() {
  std::map<int, std::unique_ptr<Link>> links;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    links.swap(links_);
  }
  for (auto& [peer, link] : links) {
    // A link still connecting gives up within the group's timeout.
    if (link->connector.joinable()) link->connector.join();
    if (link->engine) link->engine->shutdown();
  }
}

}  // namespace kolo::torch::detail

namespace kolo::torch {

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::send(std::vector<at::Tensor>& tensors,
                                                        int dstRank, int tag) {
  return pointToPoint(tensors, dstRank, tag, true);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::recv(std::vector<at::Tensor>& tensors,
                                                        int srcRank, int tag) {
  return pointToPoint(tensors, srcRank, tag, false);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::recvAnysource(std::vector<at::Tensor>&, int) {
  detail::notImplemented(
      "recv from any source (src=None) is not supported by the kolo backend: every message is "
      "matched by the pair of ranks that exchange it, so name the sender (dist.recv(tensor, "
      "src=<rank>)), or use a gloo group for this receive");
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::pointToPoint(std::vector<at::Tensor>& tensors,
                                                                int peer, int tag, bool sending) {
  const std::string call = std::string(sending ? "send(dst=" : "recv(src=") +
                           std::to_string(peer) + ", tag=" + std::to_string(tag) + ")";
  try {
    const at::Tensor& t = detail::single(tensors, call);
    detail::checkCallTensor(t, call);
    KOLO_CHECK_ARG(peer >= 0 && peer < getSize() && peer != getRank(),
                   call + ": " + std::to_string(peer) + " is not another rank of the group (size " +
                       std::to_string(getSize()) + ", this rank " + std::to_string(getRank()) +
                       ")");
    detail::C10dCall c;
    at::Tensor buffer = sending ? t.contiguous() : detail::inPlace(c, t);
    if (buffer.is_complex()) buffer = at::view_as_real(buffer);
    std::string name;
    {
      std::lock_guard<std::mutex> lock(mu_);
      name = label_ + " " + call;
    }
    auto work = c10::make_intrusive<WorkKolo>(getRank(), sending ? ::c10d::OpType::SEND
                                                                 : ::c10d::OpType::RECV,
                                              label_, name, t.device(), std::vector<at::Tensor>{t},
                                              std::move(c.finish));
    peers_->submit(sending, peer, tag, buffer, work);
    return work;
  } catch (...) {
    detail::rethrowAsTorch(label_);
  }
}

}  // namespace kolo::torch
