// Picks a backend by name ("gloo", "mpi", ...) through its factory. The only
// place that knows which backends this build has.
#pragma once

#include <memory>
#include <string>

#include "comm/backend_args.h"
#include "comm/collectives.h"
#include "comm/control_channel.h"

namespace kolo::comm {

// Throw InvalidArgument naming the backend and the variable that chose it
// when this build lacks it.
std::unique_ptr<ControlChannel> createControlChannel(const std::string& backend,
                                                     const BackendArgs& args);
std::unique_ptr<Collectives> createCollectives(const std::string& backend,
                                               const BackendArgs& args);

}  // namespace kolo::comm
