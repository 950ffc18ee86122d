// In-process store for ranks running as threads of one process: the same
// map-backed Store that TcpStoreServer::localStore() serves, over a map of
// its own.
#include "kolo/store.h"
#include "rendezvous/key_value_map.h"

namespace kolo {

std::shared_ptr<Store> makeHashStore() {
  return rendezvous::makeMapStore(std::make_shared<rendezvous::KeyValueMap>());
}

}  // namespace kolo
