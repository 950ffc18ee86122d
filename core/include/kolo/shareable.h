/// \file
/// Host memory that the ranks of a host reduce in place.
///
/// A CPU buffer that kolo allreduces step after step (a gradient bucket)
/// costs less when it comes from here. When every rank's buffer of an
/// allreduce of more than 16 KiB lies in such memory, the shared-memory data
/// plane reads and writes the ranks' buffers directly: one read and one
/// write per byte, instead of copying each buffer through the plane's
/// segment and back. kolo::torch::GradientReducer (and so the
/// DistributedOptimizer, C++ and Python) allocates its CPU buckets here.
#pragma once

#include <cstddef>
#include <memory>

namespace kolo {

/// `bytes` (rounded up to whole pages) of zero-filled, page-aligned memory
/// from this process's shared arena, given back when the last copy of the
/// pointer goes. Null when there is none: kolo has not set up its
/// shared-memory data plane in this process (another plane, KOLO_SHM=0, a
/// rank alone on its host, or before init()), the system could not make
/// one, or it is full. Allocate as usual then; kolo reduces either kind.
/// Any thread.
std::shared_ptr<void> allocateShareable(size_t bytes);

}  // namespace kolo
