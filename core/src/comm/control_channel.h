// ControlChannel: what the controller needs to negotiate. Implementations:
// comm/gloo, comm/mpi.
//
// Threading: every method is called from the engine's background thread
// only, and every rank calls the same methods in the same order. Methods
// throw PeerFailure (a peer closed its connection) or Timeout (a peer stopped
// answering for Config::timeout).
#pragma once

#include <cstdint>
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
};

}  // namespace kolo::comm
