#pragma once
// The network interface a rank uses for its data plane (KOLO_IFACE).

#include <string>

namespace kolo::comm::tcp {

/// An interface of this host and its IPv4 address.
struct LocalInterface {
  std::string name;
  std::string address;
};

/// The first interface of `list` (KOLO_IFACE: one name, or names separated
/// by commas, as kolorun's --network-interfaces passes them) that this host
/// has with an IPv4 address. Hosts of one job may differ: each rank takes
/// the first of the list it has. Throws InvalidArgument naming the list and
/// this host's interfaces when it has none of them.
LocalInterface chooseInterface(const std::string& list);

}  // namespace kolo::comm::tcp
