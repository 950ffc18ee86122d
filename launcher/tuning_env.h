// What kolorun's tuning and backend flags mean to the workers: the KOLO_*
// (and NCCL_*) variables each worker starts with, on every launch path
// (kolorun's own workers and mpirun's -x list).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "options.h"

namespace kolo::launcher {

using EnvList = std::vector<std::pair<std::string, std::string>>;

// KOLO_* variables for the tuning and backend flags that were given.
EnvList tuningEnv(const Options& options);

}  // namespace kolo::launcher
