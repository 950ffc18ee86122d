// The two-rank engines a kolo process group's send and recv run on.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "c10d_work.h"
#include "kolo/config.h"
#include "kolo/engine.h"
#include "kolo/store.h"

namespace kolo::torch::detail {

// One engine per pair of ranks that exchange messages, connected in the
// background the first time either side sends or receives (so an isend
// returns at once, and the pair meets whenever the peer gets there; a peer
// that never does fails the work after the group's timeout). A message is a
// broadcast from the sender in the pair's engine, named by the pair, the tag
// and its place among the pair's messages with that tag: messages between
// two ranks with one tag match in the order each side made them, and the
// negotiation checks that both sides agree on dtype and shape.
class PeerLinks {
 public:
  // group: this rank's place in the group; store: the group's (pairs meet
  // under "kolo/p2p/<lower rank>-<higher rank>/"); label: for messages.
  PeerLinks(const kolo::Config& config, const kolo::Identity& group,
            std::shared_ptr<kolo::Store> store, std::string label);
  ~PeerLinks();  // shutdown()

  // Starts a send (sending) of tensor to peer, or a receive into it,
  // completing work. work is started when the pair's engine is up, or
  // failed when it cannot connect. Any thread.
  void submit(bool sending, int peer, int tag, const at::Tensor& tensor,
              const c10::intrusive_ptr<ProcessGroupKolo::WorkKolo>& work);

  void abort(const std::string& why);
  void shutdown();

 private:
  struct Link;
  Link& linkTo(int peer);
  void connect(Link& link, int peer);

  const kolo::Config config_;
  const kolo::Identity group_;
  const std::shared_ptr<kolo::Store> store_;
  const std::string label_;
  std::mutex mu_;
  bool stopped_ = false;
  std::map<int, std::unique_ptr<Link>> links_;  // by peer
  // Messages so far from (source, destination) with tag.
  std::map<std::tuple<int, int, int>, uint64_t> counts_;
};

}  // namespace kolo::torch::detail
