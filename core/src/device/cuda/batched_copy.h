// One kernel launch that copies many tensors (pack into a fusion buffer, or
// unpack out of it), transforming elements on the way (copy_plan.h).
//
// Threading: any thread; the launch is ordered on `stream` like any kernel.
// The descriptors are copied into the launch's parameters during the call:
// the caller's memory is free again when it returns. No host wait, no
// event, no device allocation.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "device/copy_plan.h"
#include "kolo/types.h"

namespace kolo::device::cuda {

// One launch of a CopyPlan (CopyLaunch), as the kernel takes it.
struct LaunchShape {
  const DeviceCopyDesc* descs = nullptr;  // host memory: numDescs of them
  uint32_t numDescs = 0;                  // 1 .. kMaxDescsPerLaunch
  uint64_t chunks = 0;                    // over the descs, numbered from 0
  uint64_t chunkElements = 0;
  uint32_t grid = 0;  // blocks, 1 .. chunks (copyGridSize); they stride over the chunks
};

// Launches the kernel of dtype and transform for shape: the small tier's
// (kSmallDescsPerLaunch descriptors of parameters) when numDescs fits it,
// else the large tier's. No-op when chunks == 0. Throws InvalidArgument for
// a transform the dtype has no kernel for, Internal when the launch fails.
void launchBatchedCopy(const LaunchShape& shape, DataType dtype, const CopyTransform& transform,
                       cudaStream_t stream);

}  // namespace kolo::device::cuda
