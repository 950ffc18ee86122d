#include "comm/gloo/factory.h"

#include "comm/gloo/collectives.h"
#include "comm/gloo/context.h"
#include "comm/gloo/control_channel.h"

namespace kolo::comm::gloo {

std::unique_ptr<comm::ControlChannel> createControlChannel(const BackendArgs& args) {
  return std::make_unique<ControlChannel>(Context::connect(args, "control/"));
}

std::unique_ptr<comm::Collectives> createCollectives(const BackendArgs& args) {
  return std::make_unique<Collectives>(Context::connect(args, "data/"));
}

}  // namespace kolo::comm::gloo
