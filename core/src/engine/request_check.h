// Caller-side validation of a request before it is queued: everything that
// can be decided without the other ranks fails here, on the calling thread.
#pragma once

#include "kolo/engine.h"

namespace kolo {

// Reserved names of the internal join and barrier operations.
inline constexpr const char* kJoinName = "kolo.join";
inline constexpr const char* kBarrierName = "kolo.barrier";

// Throws InvalidArgument naming the tensor and what to change. set: the
// process set the request runs in (this rank is a member); the broadcast
// root is checked against it (a rank of the job that belongs to the set).
// CUDA tensors are accepted in builds with CUDA, except what their data
// plane (config.gpuOperations) cannot do: Adasum, and int16 reductions on
// NCCL.
void checkRequest(const Request& request, const Entry& entry, const ProcessSetInfo& set,
                  const Config& config);

}  // namespace kolo
