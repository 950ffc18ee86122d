#include <utility>

#include "comm/gloo/factory.h"

#include "comm/gloo/collectives.h"
#include "comm/gloo/context.h"
#include "comm/tcp/control_channel.h"
#include "comm/tcp/mesh.h"

namespace kolo::comm::gloo {

std::unique_ptr<comm::ControlChannel> createControlChannel(const BackendArgs& args) {
  // Negotiation is latency bound: it runs over kolo's own TCP mesh, driven by
  // the calling thread, rather than through gloo's event thread.
  return tcp::createControlChannel(args);
}

std::unique_ptr<comm::Collectives> createCollectives(const BackendArgs& args) {
  auto context = Context::connect(args, "data/");
  const BackendArgs meshArgs{args.config, args.identity,
                             std::make_shared<PrefixStore>("data-mesh/", args.store),
                             args.localAddress};
  return std::make_unique<Collectives>(std::move(context),
                                       tcp::Mesh::connect(meshArgs, "data connect"));
}

}  // namespace kolo::comm::gloo
