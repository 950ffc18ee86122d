// How kolo's device and pinned buffers grow. Host logic, no runtime calls,
// tested without a GPU.
#pragma once

#include <cstddef>

namespace kolo::device {

// Rounds a request up so that a buffer grows in few, large steps: to a
// multiple of 1 MiB and at least 1.5x the old capacity.
size_t grownCapacity(size_t capacity, size_t request);

}  // namespace kolo::device
