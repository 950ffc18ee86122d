// The few CUDA runtime helpers kolo needs outside device/cuda: which device
// a pointer lives on, how many devices there are, and making a device
// current on a kolo thread.
//
// Threading: any thread.
#pragma once

#include <string>

#include "device/memory_policy.h"

namespace kolo::device::cuda {

// Makes device current on the calling thread when it is not already
// (cudaSetDevice; its failure throws Internal). Never restores: kolo's own
// threads work on one device for their whole life, and restoring "device
// 0" on a thread that never had one would create a context on GPU 0 (and
// fail in EXCLUSIVE_PROCESS mode). device < 0 does nothing.
void useDevice(int device);

// The device a pointer's memory lives on, or -1 for host memory (pageable
// or pinned) and for nullptr.
int deviceOf(const void* ptr);

// Number of usable CUDA devices; 0 when there is no device or no driver
// (then *why, when given, says what CUDA reported).
int deviceCount(std::string* why = nullptr);

}  // namespace kolo::device::cuda
