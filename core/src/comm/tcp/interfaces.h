#pragma once
// The network interface a rank uses for its data plane (KOLO_IFACE).

#include <map>
#include <string>
#include <vector>

namespace kolo::comm::tcp {

/// The names of `list` (one name, or names separated by commas); throws
/// InvalidArgument on an empty name.
std::vector<std::string> interfaceNames(const std::string& list);

/// This host's interfaces with an IPv4 address: name -> its first address.
std::map<std::string, std::string> ipv4Interfaces();

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
