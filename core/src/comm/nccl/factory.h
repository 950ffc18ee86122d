// The only way the engine reaches the NCCL backend.
//
// NCCL is a data plane only (no ControlChannel): negotiation stays on the
// gloo or MPI controller. The unique id travels through args.store (rank 0
// writes it when the communicator is first needed), so every rank must
// create its NCCL collectives in the same engine generation.
#pragma once

#include <memory>

#include "comm/backend_args.h"
#include "comm/collectives.h"
#include "comm/cuda/device_set.h"

namespace kolo::comm::nccl {

// devices: the engine's per-device comm streams, shared with the GPU
// executor so packing kernels and NCCL calls are ordered on one stream.
std::unique_ptr<comm::Collectives> createCollectives(const BackendArgs& args,
                                                     std::shared_ptr<cuda::DeviceSet> devices);

}  // namespace kolo::comm::nccl
