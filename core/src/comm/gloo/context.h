// Context: one connected gloo full mesh and kolo's error policy around it.
// ControlChannel and Collectives each own one, so control traffic and data
// traffic never share connections or slots.
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

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/backend_args.h"

namespace kolo::comm::gloo {

class Context {
 public:
  // Connects args.identity.rank to every other rank through args.store, with
  // keys under `prefix`. Every rank must call this with the same prefix.
  // Blocks until every rank's mesh is up (it ends with a barrier); throws Timeout when a peer does
  // not show up within args.config.timeout, InvalidArgument for a bad identity or interface,
  // PeerFailure for any other connection error.
  static std::unique_ptr<Context> connect(const BackendArgs& args, const std::string& prefix);

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

 private:
  Context(std::shared_ptr<::gloo::Context> context, int rank, int size,
          std::chrono::milliseconds timeout);

  [[noreturn]] void fail(const char* what, const std::string& text, bool isTimeout);
  void closeConnections() noexcept;

  std::shared_ptr<::gloo::Context> context_;
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
