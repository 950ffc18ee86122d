// TCP connections between the ranks of a job, owned and driven by one
// thread (the engine's loop): no helper threads, so a message costs the
// sender one sendmsg() and the receiver a recv() or two. This is what keeps
// a negotiation cycle cheap on machines where every thread hand-off costs a
// context switch.
//
// Never a full mesh: connect() connects the peers the caller's algorithms
// use every step (recursive doubling, binomial trees: O(log N) of them), and
// a transfer naming any other peer connects it first. A rank of a large job
// holds a few dozen sockets, not N-1, and start-up reads a few store keys,
// not N.
//
// Setup: connect() makes a listener and publishes "host:port" in the
// (backend-private) store; rank 0 also publishes a random job token. The
// higher rank of a pair connects to the lower one: it reads the addresses
// of all the lower peers it is about to connect in one batched store read,
// sends a hello carrying its rank and the token, and waits for the answer.
// A rank in connect() or in a transfer also accepts: a connection with a
// wrong token, a garbled hello or an unexpected rank is dropped (only job
// members can read the token: the store is authenticated). Waiting for the
// answer cannot deadlock: the chain of waits runs to ever lower ranks, and
// the lowest is accepting or on its way to it.
//
// Transfers are framed (magic, operation number, length) so a rank out of
// step with a peer is reported instead of misreading bytes: callers number
// their collectives (nextOperation), the same on every rank, and a frame of
// another operation is an error. Every wait is bounded by the backend
// timeout; a closed connection is PeerFailure and a silent peer is Timeout,
// both naming the peer.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/backend_args.h"
#include "kolo/error.h"
#include "kolo/store.h"
#include "rendezvous/socket.h"

namespace kolo::comm::tcp {

// Largest payload a peer may announce (a garbled length must not allocate).
constexpr uint64_t kMaxPayloadBytes = uint64_t(1) << 31;

class Mesh {
 public:
  // Listens, publishes this rank's address and connects to `neighbours`,
  // the peers the caller's algorithms use every step (so a rank that never
  // arrives is named here, and one that dies is noticed at once). Any other
  // peer is connected on first use. Throws Timeout naming the neighbours
  // that never arrived, InvalidArgument for a bad identity or interface.
  // `what` names setup in errors ("control connect").
  static std::unique_ptr<Mesh> connect(const BackendArgs& args, const std::string& what,
                                       const std::vector<int>& neighbours);
  ~Mesh();  // closes every connection: peers blocked on this rank fail promptly

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Peers connected so far.
  int connectedPeers() const;

  // Starts the next collective: every rank calls it once per collective, in
  // the same order, before the collective's transfers.
  void nextOperation() { ++operation_; }

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
  // send to each other cannot block on full socket buffers), connecting to
  // the peers named first where needed. `what` names the operation in
  // errors. Any failure poisons the mesh: later calls throw at once with
  // the first error.
  void transfer(const char* what, std::vector<Send> sends, std::vector<Recv> recvs);

  // After a failure elsewhere on this rank (ControlChannel::abandon):
  // closes every connection as a failed transfer does; later transfers
  // throw PeerFailure with why. Never throws.
  void abandon(const std::string& why) noexcept;

 private:
  Mesh(int rank, int size, std::chrono::milliseconds timeout);
  using Deadline = rendezvous::Deadline;
  // Connects to the lower ranks among peers that are not connected yet.
  void connectLower(const std::vector<int>& peers, Deadline deadline);
  // connectLower, then accepts until every higher rank among peers is in.
  void connectAll(const std::vector<int>& peers, Deadline deadline);
  // Reads the addresses of peers in one store request; names the ranks that
  // never published one.
  void readAddresses(const std::vector<int>& peers, Deadline deadline);
  void readToken(Deadline deadline);
  void setToken(const std::vector<char>& bytes);  // checks its size
  // Accepts one connection from the listener (poll said it is readable).
  void acceptOne(Deadline deadline);
  // abandon(), then throws error.
  [[noreturn]] void fail(const Error& error);
  [[noreturn]] void failTimeout(const char* what, const std::vector<int>& waitingOn,
                                const std::vector<int>& neverConnected);

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::string what_;                          // setup's name in errors
  std::shared_ptr<Store> store_;
  rendezvous::Fd listener_;
  bool haveToken_ = false;
  std::array<uint8_t, 16> token_{};
  std::vector<std::pair<std::string, uint16_t>> addresses_;  // by rank; port 0 until read
  std::vector<rendezvous::Fd> peers_;         // by rank; invalid for this rank
  uint32_t operation_ = 0;                    // collectives so far (same on every rank)
  bool failed_ = false;
  bool failedByTimeout_ = false;
  std::string failure_;
};

}  // namespace kolo::comm::tcp
