// ControlChannel: what the controller needs to negotiate. Implementations:
// comm/tcp, comm/shm, comm/mpi.
//
// Threading: every method is called from the engine's background thread
// only, and every rank calls the same methods in the same order. Methods
// throw PeerFailure (a peer closed its connection) or Timeout (a peer stopped
// answering for Config::timeout).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kolo::comm {

class ControlChannel {
 public:
  virtual ~ControlChannel() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place, element-wise across ranks. Every rank passes the same length.
  virtual void allreduceAnd(std::vector<uint64_t>& bits) = 0;
  virtual void allreduceOr(std::vector<uint64_t>& bits) = 0;

  // Root gets every rank's bytes indexed by rank (lengths may differ; its
  // own included); other ranks get an empty vector.
  virtual std::vector<std::vector<char>> gatherv(const std::vector<char>& mine,
                                                 int root) = 0;

  // Root's bytes replace everyone else's (length is sent along).
  virtual void broadcast(std::vector<char>& bytes, int root) = 0;

  virtual void barrier() = 0;

  // After a failure on this rank, before the engine finds out who failed:
  // closes this rank's connections (a shared-memory channel marks the rank
  // failed in its segment), so a peer blocked on this rank fails now and
  // starts its own diagnosis instead of waiting until this rank tears
  // down. Later calls throw, naming why. Channels that cannot (MPI) do
  // nothing. Never throws.
  virtual void abandon(const std::string& why) { (void)why; }
};

}  // namespace kolo::comm
