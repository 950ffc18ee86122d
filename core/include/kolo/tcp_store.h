/// \file
/// TCP rendezvous store: a small authenticated key-value server and its client.
///
/// Every connection starts with a mutual HMAC-SHA256 challenge over fresh
/// nonces keyed by the job secret (KOLO_SECRET_KEY); a peer that cannot answer
/// is logged and dropped, and the server keeps serving everyone else. Frames
/// are length-prefixed and bounded; a garbled or oversize frame drops only the
/// connection that sent it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "kolo/config.h"
#include "kolo/store.h"

namespace kolo {

/// Serves one job's store over TCP from a background thread, until
/// destroyed. kolorun hosts one for each job; where the launcher hosts none
/// (torchrun, Slurm) kolo::init() on rank 0 does.
class TcpStoreServer {
 public:
  /// Listens on host:port (port 0 picks a free port; host "" or "0.0.0.0"
  /// means every interface). Throws InvalidArgument naming the address when
  /// it cannot bind (e.g. the port is in use).
  TcpStoreServer(const std::string& host, uint16_t port, std::string secret);
  ~TcpStoreServer();  ///< stops serving and closes every connection

  /// Not copyable (nor movable).
  TcpStoreServer(const TcpStoreServer&) = delete;
  /// Not copy-assignable.
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  /// The port it listens on (the one picked when constructed with 0).
  uint16_t port() const;
  /// Connections refused because they failed authentication or sent a
  /// malformed frame (for tests and logs). Each is counted after its log
  /// line is written to stderr.
  uint64_t rejectedConnections() const;
  /// The server's own data as a Store, without a network hop (kolorun uses
  /// it to watch which ranks arrived). It may outlive the server; once the
  /// server is destroyed its blocking calls fail with PeerFailure.
  std::shared_ptr<Store> localStore() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Options of makeTcpStore().
struct TcpStoreOptions {
  /// How long to keep retrying the initial connection (the server may start
  /// later than the client).
  std::chrono::milliseconds connectTimeout{std::chrono::seconds(60)};
};

/// Connects (retrying until connectTimeout) and authenticates; throws
/// PeerFailure when the server refuses the secret and Timeout when it never
/// answers. The store is thread-safe: concurrent calls use separate pooled
/// connections, so a blocking get() does not delay other threads. Once the
/// server is gone calls fail with PeerFailure instead of reconnecting for long.
std::shared_ptr<Store> makeTcpStore(const std::string& host, uint16_t port,
                                    const std::string& secret,
                                    TcpStoreOptions options = {});

/// The store the launcher's environment names (info.rendezvous; see
/// launchInfoFromEnv in kolo/config.h): a TcpStore client of kolorun's
/// store, or of the one this process serves (rank 0 under torchrun or
/// Slurm; the server is then made and kept in server), connected within
/// timeout; an in-process store when the environment names none (a job of
/// size 1, or mpirun where MPI carries everything). Throws Timeout when the
/// server never answers and InvalidArgument when this process cannot serve
/// it (the port is taken).
std::shared_ptr<Store> connectLaunchStore(const LaunchInfo& info, std::chrono::milliseconds timeout,
                                          std::unique_ptr<TcpStoreServer>& server);

/// store.localAddress(): for a TcpStore (or a PrefixStore over one) the
/// local address of the socket its client uses to reach the server, the
/// interface that routes to the rendezvous host. Empty for stores that
/// cannot tell.
std::string localAddressOf(const Store& store);

/// Requests this process has sent to TCP stores so far, over all clients
/// (start-up benchmarks report it; each Store call is one request).
uint64_t storeRequestsMade();

}  // namespace kolo
