// One kernel launch that copies many tensors (pack into a fusion buffer, or
// unpack out of it), transforming elements on the way (copy_plan.h).
//
// Threading: any thread; the launch is ordered on `stream` like any kernel.
// descs must be device-readable and stay valid until the kernel has run.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "comm/cuda/copy_plan.h"
#include "kolo/types.h"

namespace kolo::comm::cuda {

// Launches plan.chunks blocks over numDescs descriptors at deviceDescs (a
// device copy of plan.descs). No-op when chunks == 0. Throws Internal when
// the launch fails.
void launchBatchedCopy(const DeviceCopyDesc* deviceDescs, uint32_t numDescs, uint64_t chunks,
                       uint64_t chunkElements, DataType dtype, const CopyTransform& transform,
                       cudaStream_t stream);

}  // namespace kolo::comm::cuda
