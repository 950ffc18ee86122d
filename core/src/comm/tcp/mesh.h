// A full mesh of TCP connections between the ranks of a job, owned and
// driven by one thread (the engine's loop): no helper threads, so a message
// costs the sender one sendmsg() and the receiver a recv() or two. This is
// what keeps a negotiation cycle cheap on machines where every thread
// hand-off costs a context switch.
//
// Setup: each rank listens on an ephemeral port and publishes "host:port" in
// the (backend-private) store; rank 0 publishes a random job token. Every
// rank connects to each lower rank and accepts from each higher one; the
// connecting side sends a hello carrying its rank and the token and the
// accepting side answers. A connection with a wrong token, a garbled hello
// or an unexpected rank is dropped and setup goes on (only job members can
// read the token: the store is authenticated).
//
// Transfers are framed (magic, kind, sequence number, length) so a rank out
// of step with its peers is reported instead of misreading bytes. Every wait
// is bounded by the backend timeout; a closed connection is PeerFailure and
// a silent peer is Timeout, both naming the peer.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/backend_args.h"
#include "kolo/error.h"
#include "rendezvous/socket.h"

namespace kolo::comm::tcp {

// Largest payload a peer may announce (a garbled length must not allocate).
constexpr uint64_t kMaxPayloadBytes = uint64_t(1) << 31;

class Mesh {
 public:
  // Connects to every other rank; throws Timeout naming the ranks that never
  // showed up, InvalidArgument for a bad identity or interface.
  static std::unique_ptr<Mesh> connect(const BackendArgs& args, const std::string& what);
  ~Mesh();  // closes every connection: peers blocked on this rank fail promptly

  int rank() const { return rank_; }
  int size() const { return size_; }

  // One outgoing message: header + bytes, to rank `to`.
  struct Send {
    int to;
    const char* data;
    uint64_t length;
  };
  // One incoming message from rank `from`. With `expected` >= 0 the length
  // must match and lands in `fixed`; otherwise `grow` is resized to fit.
  struct Recv {
    int from;
    char* fixed = nullptr;
    int64_t expected = -1;
    std::vector<char>* grow = nullptr;
  };

  // Moves every send and receive of one step concurrently (so two ranks that
  // send to each other cannot block on full socket buffers). `what` names
  // the operation in errors. Any failure poisons the mesh: later calls throw
  // at once with the first error.
  void transfer(const char* what, std::vector<Send> sends, std::vector<Recv> recvs);

 private:
  struct Peer;
  Mesh(int rank, int size, std::chrono::milliseconds timeout);
  [[noreturn]] void fail(const Error& error);
  [[noreturn]] void failTimeout(const char* what, const std::vector<int>& waitingOn);

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::vector<rendezvous::Fd> peers_;  // by rank; invalid for this rank
  uint32_t sequence_ = 0;              // transfers so far (same on every rank)
  bool failed_ = false;
  bool failedByTimeout_ = false;
  std::string failure_;
};

}  // namespace kolo::comm::tcp
