// device::cudaRuntime() in a build without CUDA: there is none (the GPU
// path then runs only over a runtime given in Config::deviceRuntime).
#include "device/runtime.h"

namespace kolo::device {

std::shared_ptr<Runtime> cudaRuntime() { return nullptr; }

}  // namespace kolo::device
