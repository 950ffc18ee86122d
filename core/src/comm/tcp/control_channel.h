// The controller's channel over kolo's own TCP mesh (comm/tcp/mesh.h): the
// per-cycle bit allreduce, gathers to the coordinator and its broadcasts, on
// the engine's loop thread with no helper threads. Used with the gloo
// backend (gloo's own collectives hand every message through its event
// thread, which made a negotiation cycle cost a millisecond or more on small
// machines); the MPI backend keeps its MPI control channel.
//
// Threading: as comm::ControlChannel (one calling thread, same order on every
// rank). Destroying it closes its connections so peers blocked in a call fail
// with PeerFailure.
#pragma once

#include <memory>
#include <vector>

#include "comm/backend_args.h"
#include "comm/control_channel.h"
#include "comm/tcp/mesh.h"

namespace kolo::comm::tcp {

class ControlChannel final : public comm::ControlChannel {
 public:
  explicit ControlChannel(std::unique_ptr<Mesh> mesh);

  int rank() const override { return mesh_->rank(); }
  int size() const override { return mesh_->size(); }

  // Recursive doubling: the ranks past the largest power of two p fold
  // into rank - p first and get the result back last; in between, log2 p
  // rounds with partner rank ^ 2^k.
  void allreduceAnd(std::vector<uint64_t>& bits) override;
  void allreduceOr(std::vector<uint64_t>& bits) override;
  // Binomial trees over rank - root: ceil(log2 n) rounds, each rank talks
  // to its parent and at most log2 n children. A gather's messages carry
  // (rank, length, bytes) records, so the root gets every payload intact.
  std::vector<std::vector<char>> gatherv(const std::vector<char>& mine, int root) override;
  void broadcast(std::vector<char>& bytes, int root) override;
  void barrier() override;
  void abandon(const std::string& why) override { mesh_->abandon(why); }

 private:
  void allreduceBits(std::vector<uint64_t>& bits, bool isAnd, const char* what);
  void checkRoot(int root, const char* what) const;

  std::unique_ptr<Mesh> mesh_;
  std::vector<uint64_t> incoming_;
  std::vector<char> records_;
};

// Connects the mesh (store keys under "control/").
std::unique_ptr<comm::ControlChannel> createControlChannel(const BackendArgs& args);

}  // namespace kolo::comm::tcp
