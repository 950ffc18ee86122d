// The only way the engine reaches the gloo backend.
//
// Each call connects its own full mesh through args.store (keys under
// "control/" for the control channel, which is kolo's TCP mesh, and "data/"
// plus "data-mesh/" for the collectives), so every rank must make the same
// calls in the same order. Blocks until all args.identity.size ranks are
// connected; throws Timeout after args.config.timeout. Size 1 needs no peers.
#pragma once

#include <memory>

#include "comm/backend_args.h"
#include "comm/collectives.h"
#include "comm/control_channel.h"

namespace kolo::comm::gloo {

std::unique_ptr<comm::ControlChannel> createControlChannel(const BackendArgs& args);
std::unique_ptr<comm::Collectives> createCollectives(const BackendArgs& args);

}  // namespace kolo::comm::gloo
