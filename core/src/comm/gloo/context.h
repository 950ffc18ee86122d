// Context: a gloo context whose pairs are connected on first use, and kolo's
// error policy around it. Every collective names the peers its algorithm
// talks to (connectPeers) before it runs, so a rank of a ring or tree holds
// O(log N) connections instead of gloo's full mesh of N-1, and start-up
// reads a few store keys instead of N.
//
// Threading: every method except the destructor is called from the one
// thread that drives the owning channel (the engine's background thread),
// and every rank calls run() in the same order. The destructor must not race
// with a run() on the same object.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/backend_args.h"

namespace kolo::comm::gloo {

class Context {
 public:
  // Opens this rank's gloo device (its listener) and connects the pairs to
  // `neighbours` (connectPeers); others are connected on first use. Pair
  // addresses go through args.store under `prefix`, the same on every rank.
  // Throws Timeout when a neighbour does not show up within
  // args.config.timeout, InvalidArgument for a bad identity or interface,
  // PeerFailure for any other connection error.
  static std::unique_ptr<Context> connect(const BackendArgs& args, const std::string& prefix,
                                          const std::vector<int>& neighbours);

  // Connects the pairs to those of peers not connected yet. Collective
  // between the two ends of each new pair: both name each other in the
  // same collective (rings and trees do). Called inside run(); throws
  // Timeout naming the ranks that never published an address.
  void connectPeers(const std::vector<int>& peers);
  // Peers connected so far.
  int connectedPeers() const;

  // Closes every connection (after flushing what was sent), so a peer blocked
  // in a collective with this rank fails promptly with PeerFailure instead of
  // waiting for its timeout.
  ~Context();

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::shared_ptr<::gloo::Context>& glooContext() const { return context_; }

  // Runs one collective named `what` (e.g. "allreduce"). fn receives a tag
  // that is unique per call and identical on every rank. gloo errors become
  // Timeout or PeerFailure ("gloo allreduce failed: <gloo's text>"); after
  // the first failure the connections are closed (so peers fail too) and
  // every later run() throws at once without touching the network.
  void run(const char* what, const std::function<void(uint32_t tag)>& fn);

  // After a failure elsewhere on this rank (comm::Collectives::abandon):
  // closes the connections as a failed run() does; later runs throw
  // PeerFailure with why. Never throws.
  void abandon(const std::string& why) noexcept;

 private:
  Context(std::shared_ptr<::gloo::Context> context,
          std::shared_ptr<::gloo::transport::Context> transport, std::shared_ptr<Store> store,
          int rank, int size, std::chrono::milliseconds timeout);

  [[noreturn]] void fail(const char* what, const std::string& text, bool isTimeout);

  std::shared_ptr<::gloo::Context> context_;
  std::shared_ptr<::gloo::transport::Context> transport_;
  std::shared_ptr<Store> store_;
  std::vector<bool> connected_;  // by rank
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  uint32_t nextTag_ = 1;
  bool failed_ = false;
  bool failedByTimeout_ = false;
  std::string failure_;
};

// Blocking waits on an unbound buffer bounded by timeout. gloo signals a
// timeout or a closed peer by throwing; an aborted wait (false) is turned into
// a gloo-style exception too, so Context::run maps all of them.
void waitSend(::gloo::transport::UnboundBuffer& buf, std::chrono::milliseconds timeout);
void waitRecv(::gloo::transport::UnboundBuffer& buf, std::chrono::milliseconds timeout);

}  // namespace kolo::comm::gloo
