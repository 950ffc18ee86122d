#include "comm/conformance.h"

#include <exception>
#include <mutex>
#include <stdexcept>

#include "harness/harness.h"
#include "kolo/error.h"
#include "kolo/store.h"

namespace kolo::test {
namespace {

comm::BackendArgs argsFor(const Config& config, const Identity& identity,
                          const std::shared_ptr<Store>& store) {
  return comm::BackendArgs{config, identity, store, "127.0.0.1"};
}

}  // namespace

void runWithArgs(int n, const std::function<void(int rank, const comm::BackendArgs&)>& fn,
                 const Config& config) {
  auto store = makeHashStore();
  // A rank that fails a check throws and destroys its channels, so its peers
  // then fail with PeerFailure. Report the check, not the consequence.
  std::mutex mu;
  std::string rootCause;
  try {
    runRanks(n, [&](int rank) {
      const Identity id = localIdentity(rank, n);
      try {
        fn(rank, argsFor(config, id, store));
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kPeerFailure || e.code() == ErrorCode::kTimeout) throw;
        std::lock_guard<std::mutex> lock(mu);
        if (rootCause.empty()) rootCause = "rank " + std::to_string(rank) + ": " + e.what();
        throw;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (rootCause.empty()) rootCause = "rank " + std::to_string(rank) + ": " + e.what();
        throw;
      }
    });
  } catch (const std::exception& e) {
    if (!rootCause.empty()) throw std::runtime_error(rootCause);
    throw;
  }
}

}  // namespace kolo::test
