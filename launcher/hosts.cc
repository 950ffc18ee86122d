#include "hosts.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "usage_error.h"

namespace kolo::launcher {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Slot counts are positive decimal integers without sign or spaces.
bool parseSlots(const std::string& text, int* slots) {
  if (text.empty() || text.size() > 7) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  *slots = std::stoi(text);
  return *slots > 0;
}

// Host names reach argv of ssh and messages, never a shell; still, accept only
// what a host can be: letters, digits, . - _ and an optional "user@".
void checkHostName(const std::string& host, const std::string& where) {
  std::string name = networkName(host);
  bool bracketed = host.find('[') != std::string::npos;
  bool ok = !name.empty();
  for (char c : bracketed ? name : host) {
    bool allowed = bracketed ? (std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.')
                             : (std::isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                                c == '-' || c == '_' || c == '@');
    ok = ok && allowed;
  }
  if (bracketed && host.back() != ']') ok = false;
  if (!ok) {
    throw UsageError(where + "bad host name '" + host +
                     "' (use letters, digits, '.', '-', '_', optionally user@host, or [ipv6])");
  }
}

void addHost(std::vector<HostSlots>* hosts, HostSlots h, const std::string& where) {
  checkHostName(h.host, where);
  for (const auto& other : *hosts) {
    if (other.host == h.host) {
      throw UsageError(where + "host '" + h.host +
                       "' is listed twice; list each host once with all its slots");
    }
  }
  hosts->push_back(std::move(h));
}

}  // namespace

std::string networkName(const std::string& host) {
  std::string name = host.substr(host.find('@') == std::string::npos ? 0 : host.find('@') + 1);
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  return name;
}

namespace {

// One "host", "host:slots" or "[v6]:slots" item; defaultSlots when no ":N".
HostSlots parseHostItem(const std::string& item, const std::string& where, int defaultSlots) {
  HostSlots h;
  h.slots = defaultSlots;
  std::string slotText;
  bool hasSlots = false;
  if (item.front() == '[') {
    size_t close = item.find(']');
    if (close == std::string::npos) {
      throw UsageError(where + "missing ']' in '" + item + "'; write IPv6 as [addr]:slots");
    }
    h.host = item.substr(0, close + 1);
    std::string rest = item.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        throw UsageError(where + "expected ':slots' after '" + h.host + "'");
      }
      hasSlots = true;
      slotText = rest.substr(1);
    }
  } else {
    size_t colons = std::count(item.begin(), item.end(), ':');
    if (colons > 1) {
      throw UsageError(where + "'" + item +
                       "' has more than one ':'; write IPv6 addresses as [addr]:slots");
    }
    size_t colon = item.find(':');
    h.host = item.substr(0, colon);
    if (colon != std::string::npos) {
      hasSlots = true;
      slotText = item.substr(colon + 1);
    }
  }
  if (hasSlots && !parseSlots(slotText, &h.slots)) {
    throw UsageError(where + "slots of '" + h.host + "' must be a positive integer, got '" +
                     slotText + "'");
  }
  return h;
}

}  // namespace

std::vector<HostSlots> parseHostList(const std::string& text) {
  const std::string where = "-H '" + text + "': ";
  std::vector<HostSlots> hosts;
  std::stringstream items(text);
  std::string item;
  bool any = false;
  while (std::getline(items, item, ',')) {
    any = true;
    item = trim(item);
    if (item.empty()) {
      throw UsageError(where + "empty host entry; write -H host1:slots,host2:slots");
    }
    addHost(&hosts, parseHostItem(item, where, 1), where);
  }
  if (!any || (!text.empty() && text.back() == ',')) {
    throw UsageError(where + "empty host entry; write -H host1:slots,host2:slots");
  }
  return hosts;
}

std::vector<HostSlots> parseDiscoveryOutput(const std::string& text, int defaultSlots,
                                            const std::string& script) {
  std::vector<HostSlots> hosts;
  std::stringstream lines(text);
  std::string line;
  int lineNo = 0;
  while (std::getline(lines, line)) {
    ++lineNo;
    const std::string where =
        "--host-discovery-script '" + script + "', line " + std::to_string(lineNo) + ": ";
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    if (line.find_first_of(" \t,") != std::string::npos) {
      throw UsageError(where + "'" + line + "': print one 'host:slots' per line");
    }
    addHost(&hosts, parseHostItem(line, where, defaultSlots), where);
  }
  return hosts;
}

std::vector<HostSlots> parseHostfile(std::istream& in, const std::string& fileName) {
  std::vector<HostSlots> hosts;
  std::string line;
  int lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    const std::string where = fileName + ":" + std::to_string(lineNo) + ": ";
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::stringstream words(line);
    HostSlots h;
    words >> h.host;
    std::string word;
    bool sawSlots = false;
    while (words >> word) {
      if (word.rfind("slots=", 0) == 0 && !sawSlots) {
        sawSlots = true;
        std::string n = word.substr(6);
        if (!parseSlots(n, &h.slots)) {
          throw UsageError(where + "slots must be a positive integer, got '" + n + "'");
        }
      } else {
        throw UsageError(where + "unexpected '" + word + "'; write lines as 'host slots=N'");
      }
    }
    addHost(&hosts, std::move(h), where);
  }
  if (hosts.empty()) {
    throw UsageError(fileName + ": no hosts in the hostfile; write one 'host slots=N' per line");
  }
  return hosts;
}

std::vector<HostSlots> readHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read hostfile '" + path + "'; check the path");
  return parseHostfile(in, path);
}

std::vector<RankPlacement> assignRanks(const std::vector<HostSlots>& hosts, int np) {
  long total = 0;
  for (const auto& h : hosts) total += h.slots;
  if (np < 1) throw UsageError("-np must be at least 1");
  if (np > total) {
    throw UsageError("-np " + std::to_string(np) + " needs more slots than the hosts have (" +
                     std::to_string(total) + ": " + describeHosts(hosts) +
                     "); add hosts or slots, or lower -np");
  }
  std::vector<RankPlacement> ranks;
  std::vector<int> perHost;  // ranks on each used host, in host order
  for (size_t h = 0; h < hosts.size() && static_cast<int>(ranks.size()) < np; ++h) {
    int n = std::min(hosts[h].slots, np - static_cast<int>(ranks.size()));
    for (int local = 0; local < n; ++local) {
      RankPlacement p;
      p.rank = static_cast<int>(ranks.size());
      p.size = np;
      p.localRank = local;
      p.localSize = n;
      p.host = hosts[h].host;
      ranks.push_back(p);
    }
    perHost.push_back(n);
  }
  // Cross rank and size: among the hosts that have a rank with this local
  // rank (hosts with fewer ranks have none), this host's index and count.
  size_t host = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0 && ranks[i].localRank == 0) ++host;
    auto& p = ranks[i];
    auto has = [&](int n) { return n > p.localRank; };
    p.crossRank = static_cast<int>(std::count_if(perHost.begin(), perHost.begin() + host, has));
    p.crossSize = static_cast<int>(std::count_if(perHost.begin(), perHost.end(), has));
  }
  return ranks;
}

std::string describeHosts(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    if (!out.empty()) out += ",";
    out += h.host + ":" + std::to_string(h.slots);
  }
  return out;
}

LocalNames localNames() {
  LocalNames local;
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) == 0 && buf[0] != '\0') {
    std::string name = lower(buf);
    local.names.insert(name);
    local.names.insert(name.substr(0, name.find('.')));
  }
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (auto* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr) continue;
      char text[INET6_ADDRSTRLEN] = {};
      if (a->ifa_addr->sa_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text,
                  sizeof(text));
      } else if (a->ifa_addr->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, text,
                  sizeof(text));
      } else {
        continue;
      }
      local.addresses.insert(text);
    }
    freeifaddrs(list);
  }
  return local;
}

bool isLocalHost(const std::string& host, const LocalNames& local) {
  std::string name = lower(networkName(host));
  in_addr v4{};
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127) return true;
  if (name == "localhost" || name == "::1") return true;
  return local.names.count(name) > 0 || local.addresses.count(name) > 0;
}

}  // namespace kolo::launcher
