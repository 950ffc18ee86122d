/// \file
/// The one definition of a rank's local and cross ranks, from where every
/// rank runs. The engine's process sets use it, and so do programs that
/// learn the job's layout themselves (the c10d backend exchanges hostKey()
/// through torch's store).
#pragma once

#include <string>
#include <vector>

#include "kolo/config.h"

namespace kolo {

/// rank's identity in a job whose rank r runs on hosts[r] (hostKey() or any
/// name of the host): size is hosts.size(); the local rank counts the ranks
/// before rank on its host and the local size all ranks there; the cross
/// rank is rank's place among the ranks with its local rank, hosts taken in
/// the order of their lowest rank, and the cross size their number (the
/// number of hosts when every host runs as many ranks). Throws
/// InvalidArgument when rank is not in [0, hosts.size()).
Identity identityFromHosts(int rank, const std::vector<std::string>& hosts);

}  // namespace kolo
