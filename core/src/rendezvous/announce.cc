#include "kolo/arrival.h"

#include "kolo/error.h"
#include "kolo/tcp_store.h"

namespace kolo {

std::string arrivalKey(int rank) { return "kolo/arrived/" + std::to_string(rank); }

bool announceArrival(std::chrono::milliseconds timeout, const EnvLookup& env) {
  LaunchInfo info;
  try {
    info = launchInfoFromEnv(env);
  } catch (const Error&) {
    return false;  // not a launcher's environment kolo reads (torch's own, say)
  }
  if (info.launcher != "kolo" || info.rendezvous.addr.empty()) return false;
  TcpStoreOptions options;
  options.connectTimeout = timeout;
  makeTcpStore(info.rendezvous.addr, info.rendezvous.port, info.rendezvous.secret, options)
      ->set(arrivalKey(info.identity.rank), {'1'});
  return true;
}

}  // namespace kolo
