// Runs negotiated responses on this rank: packs inputs into the fusion
// buffer, calls the data-plane collective, applies scales, unpacks outputs
// and completes handles. Loop thread only.
#pragma once

#include <memory>
#include <vector>

#include "comm/collectives.h"
#include "fusion.h"
#include "kolo/engine.h"
#include "message.h"
#include "pending.h"

namespace kolo {

class Executor {
 public:
  Executor(const Identity& identity, std::unique_ptr<comm::Collectives> collectives,
           EngineStats& stats);

  // ops[i] is this rank's operation for response.names[i], or nullptr when
  // this rank has joined and contributes a neutral value. Fills results into
  // the ops' handle states (shape, splits) but does not complete them; throws
  // on backend failure (the engine then fails the job).
  void execute(const Response& response, const std::vector<PendingOp*>& ops);

  comm::Collectives& collectives() { return *collectives_; }

 private:
  void allreduce(const Response& r, const std::vector<PendingOp*>& ops);
  void broadcast(const Response& r, PendingOp* op);
  void allgather(const Response& r, PendingOp* op);
  void alltoall(const Response& r, PendingOp* op);
  void reducescatter(const Response& r, PendingOp* op);

  // Scale applied after a reduction: postscale, and 1/size for average.
  void finishReduction(void* buf, size_t count, const Response& r);

  const Identity& identity_;
  std::unique_ptr<comm::Collectives> collectives_;
  EngineStats& stats_;
  FusionBuffer fusion_;
  FusionBuffer scratch_;
};

// Fills buf with the identity element of op (0 for sum, 1 for product, the
// largest value for min, the lowest for max): what a joined rank contributes.
void fillNeutral(void* buf, size_t count, DataType dtype, ReduceOp op);

}  // namespace kolo
