#include <utility>

#include "comm/shm/factory.h"

#include "comm/shm/collectives.h"
#include "comm/shm/control_channel.h"
#include "comm/shm/group.h"

namespace kolo::comm::shm {
namespace {

BackendArgs withPrefix(const BackendArgs& args, const char* prefix) {
  return BackendArgs{args.config, args.identity, std::make_shared<PrefixStore>(prefix, args.store),
                     args.localAddress};
}

}  // namespace

std::unique_ptr<comm::ControlChannel> createControlChannel(const BackendArgs& args) {
  return std::make_unique<ControlChannel>(
      Group::connect(withPrefix(args, "shm-control/"), kControlSlotBytes, "control"));
}

std::unique_ptr<comm::Collectives> createCollectives(const BackendArgs& args) {
  return createCollectivesWithin(args, {});
}

std::unique_ptr<comm::Collectives> createCollectivesWithin(const BackendArgs& args,
                                                           std::vector<int> groupRanks) {
  return std::make_unique<Collectives>(Group::connect(withPrefix(args, "shm-data/"),
                                                      dataSlotBytes(args.identity.size), "data",
                                                      std::move(groupRanks), /*shareArena=*/true));
}

}  // namespace kolo::comm::shm
