// Runs the host-buffer comm conformance suite against a GPU data plane:
// every call copies its host buffers to fresh device memory, calls the GPU
// collectives on the copies and copies the results back.
#pragma once

#include <memory>

#include "comm/backend_args.h"
#include "comm/collectives.h"

namespace kolo::test {

std::unique_ptr<comm::Collectives> mirrorOnDevice(std::unique_ptr<comm::Collectives> inner);

// createGpuCollectives(backend, args, new DeviceSet) behind mirrorOnDevice.
std::unique_ptr<comm::Collectives> createMirroredGpuCollectives(const char* backend,
                                                                const comm::BackendArgs& args);

}  // namespace kolo::test
