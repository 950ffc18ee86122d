#include "comm/tcp/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "kolo/error.h"

namespace kolo::comm::tcp {

std::vector<std::string> interfaceNames(const std::string& list) {
  std::vector<std::string> names;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    std::string name = list.substr(begin, end - begin);
    KOLO_CHECK_ARG(!name.empty(), "KOLO_IFACE='" + list +
                                      "': expected interface names separated by commas");
    names.push_back(name);
    begin = end + 1;
  }
  return names;
}

std::map<std::string, std::string> ipv4Interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    throw InvalidArgument("cannot list network interfaces: " + std::string(std::strerror(errno)));
  }
  std::map<std::string, std::string> found;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {0};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) {
      found.emplace(a->ifa_name, text);
    }
  }
  ::freeifaddrs(list);
  return found;
}

LocalInterface chooseInterface(const std::string& list) {
  const std::vector<std::string> names = interfaceNames(list);
  const std::map<std::string, std::string> here = ipv4Interfaces();
  for (const auto& name : names) {
    if (auto it = here.find(name); it != here.end()) return {name, it->second};
  }
  std::string known;
  for (const auto& [name, address] : here) {
    known += (known.empty() ? "" : ", ") + name + " (" + address + ")";
  }
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  throw InvalidArgument(
      std::string(names.size() == 1 ? "no network interface named '" + list + "'"
                                    : "none of the network interfaces '" + list + "'") +
      " (KOLO_IFACE) with an IPv4 address on host " + host + "; interfaces here: " +
      (known.empty() ? "none" : known) +
      ". Name one of them, or list one per kind of host separated by commas "
      "(kolorun --network-interfaces a,b): each rank takes the first it has");
}

}  // namespace kolo::comm::tcp
