#include "comm/nccl/factory.h"

#include <utility>

#include "comm/nccl/collectives.h"

namespace kolo::comm::nccl {

std::unique_ptr<comm::Collectives> createCollectives(const BackendArgs& args,
                                                     std::shared_ptr<cuda::DeviceSet> devices) {
  return std::make_unique<Collectives>(args, std::move(devices));
}

}  // namespace kolo::comm::nccl
