// The only way the engine reaches the shared-memory backend.
//
// For a group whose ranks are all on this host (host.h; select.cc decides
// that): each call attaches a Group of its own through args.store (keys
// under "shm-control/" or "shm-data/"), so every rank must make the same
// calls in the same order. Blocks until every rank attached; throws Timeout
// after args.config.timeout, and Internal with the first rank's error on
// every rank when one cannot attach (e.g. a full /dev/shm). Size 1 needs no
// peers.
#pragma once

#include <memory>

#include "comm/backend_args.h"
#include "comm/collectives.h"
#include "comm/control_channel.h"

namespace kolo::comm::shm {

std::unique_ptr<comm::ControlChannel> createControlChannel(const BackendArgs& args);
std::unique_ptr<comm::Collectives> createCollectives(const BackendArgs& args);

// The same for the ranks of one host within a larger group (the local
// stage of comm/hierarchical): groupRanks[r] is local rank r's rank in that
// group, which is how errors name it.
std::unique_ptr<comm::Collectives> createCollectivesWithin(const BackendArgs& args,
                                                           std::vector<int> groupRanks);

}  // namespace kolo::comm::shm
