// kolorun --check-build: what this build of kolo has, in the layout of
// horovodrun --check-build (frameworks, controllers, tensor operations),
// plus kolo's own data planes and devices.
#pragma once

#include <string>

namespace kolo::launcher {

// The report, from kolo/build_config.h and the build's LibTorch setting
// (KOLO_BUILT_WITH_TORCH). verbose: a blank line first, as horovodrun's.
std::string checkBuildReport(bool verbose = false);

}  // namespace kolo::launcher
