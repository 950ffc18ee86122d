// The controller's channel over MPI: small messages, latency bound.
//
// Threading: as comm::ControlChannel (one calling thread, same order on every
// rank). Every call is bounded by Config::timeout (see context.h).
#pragma once

#include <memory>
#include <vector>

#include "comm/control_channel.h"
#include "comm/mpi/context.h"

namespace kolo::comm::mpi {

class ControlChannel final : public comm::ControlChannel {
 public:
  explicit ControlChannel(std::unique_ptr<Context> context);

  int rank() const override { return context_->rank(); }
  int size() const override { return context_->size(); }

  void allreduceAnd(std::vector<uint64_t>& bits) override;
  void allreduceOr(std::vector<uint64_t>& bits) override;
  std::vector<std::vector<char>> gatherv(const std::vector<char>& mine,
                                         int root) override;
  void broadcast(std::vector<char>& bytes, int root) override;
  void barrier() override;

 private:
  void allreduceBits(std::vector<uint64_t>& bits, bool isAnd);
  void checkRoot(int root, const char* what) const;

  std::unique_ptr<Context> context_;
};

}  // namespace kolo::comm::mpi
