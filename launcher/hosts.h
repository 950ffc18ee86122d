// Hosts, slots and where each rank runs. Pure functions: no processes, no
// network; errors are UsageError with the fix in the message.
#pragma once

#include <istream>
#include <set>
#include <string>
#include <vector>

namespace kolo::launcher {

struct HostSlots {
  std::string host;  // as the user wrote it ("node1", "user@node1", "10.0.0.2")
  int slots = 1;
};

// "-H a:2,b:4,c" (a host without ":N" has one slot; IPv6 as "[fe80::1]:2").
std::vector<HostSlots> parseHostList(const std::string& text);

// What --host-discovery-script printed: one "host:slots" or "host" (then
// defaultSlots) per line; blank lines and '#' comments are ignored; no hosts
// is fine (none available now). Errors name the script and the line.
std::vector<HostSlots> parseDiscoveryOutput(const std::string& text, int defaultSlots,
                                            const std::string& script);

// Hostfile lines: "host slots=N" or "host"; '#' starts a comment; blank lines
// are ignored. fileName only labels errors ("hosts.txt:3: ...").
std::vector<HostSlots> parseHostfile(std::istream& in, const std::string& fileName);
std::vector<HostSlots> readHostfile(const std::string& path);

// One rank's place in the job, in Horovod's terms: local = on the same host,
// cross = among the ranks with the same local rank on other hosts.
struct RankPlacement {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  int localSize = 1;
  int crossRank = 0;
  int crossSize = 1;
  std::string host;
};

// Fills hosts in order (all of host 0's slots, then host 1's, ...) with np
// ranks. Hosts left without ranks are not part of the job.
std::vector<RankPlacement> assignRanks(const std::vector<HostSlots>& hosts, int np);

// "host:N,host:N" for messages.
std::string describeHosts(const std::vector<HostSlots>& hosts);

// The host part of "user@host" or "[v6addr]" as the network sees it.
std::string networkName(const std::string& host);

// What this machine calls itself: hostnames and interface addresses.
struct LocalNames {
  std::set<std::string> names;      // lower-case host names
  std::set<std::string> addresses;  // numeric addresses of local interfaces
};
LocalNames localNames();  // reads gethostname() and getifaddrs()

// True for localhost, 127.0.0.0/8, ::1, this machine's hostname (long or
// short) and any address of a local interface. Never asks DNS.
bool isLocalHost(const std::string& host, const LocalNames& local);

}  // namespace kolo::launcher
