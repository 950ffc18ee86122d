#include <utility>

#include "comm/gloo/factory.h"

#include "comm/gloo/collectives.h"
#include "comm/gloo/context.h"
#include "comm/tcp/control_channel.h"
#include "comm/tcp/mesh.h"
#include "comm/tcp/topology.h"

namespace kolo::comm::gloo {

std::unique_ptr<comm::ControlChannel> createControlChannel(const BackendArgs& args) {
  // Negotiation is latency bound: it runs over kolo's own TCP mesh, driven by
  // the calling thread, rather than through gloo's event thread.
  return tcp::createControlChannel(args);
}

std::unique_ptr<comm::Collectives> createCollectives(const BackendArgs& args) {
  // The rings of allreduce, allgatherv and reduce-scatter.
  const int rank = args.identity.rank;
  const int size = args.identity.size;
  auto context = Context::connect(args, "data/", {(rank + size - 1) % size, (rank + 1) % size});
  const BackendArgs meshArgs{args.config, args.identity,
                             std::make_shared<PrefixStore>("data-mesh/", args.store),
                             args.localAddress};
  auto mesh = tcp::Mesh::connect(
      meshArgs, "data connect",
      tcp::recursiveDoublingPeers(args.identity.rank, args.identity.size));
  return std::make_unique<Collectives>(std::move(context), std::move(mesh));
}

}  // namespace kolo::comm::gloo
