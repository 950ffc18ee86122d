// The elastic driver's world record (kolo/elastic_world.h): line-based
// text that kolorun's driver writes to the store and every worker reads.
#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <tuple>
#include <utility>

#include "kolo/elastic_world.h"
#include "kolo/error.h"

namespace kolo::elastic {
namespace {

constexpr const char* kMagic = "kolo-world 1";

[[noreturn]] void malformed(const std::string& what) {
  throw Internal("malformed elastic world record: " + what);
}

int64_t parseInteger(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0) malformed(what + " '" + text + "'");
  return v;
}

// "a/b" -> (a, b)
std::pair<int, int> parsePair(const std::string& text, const std::string& what) {
  size_t slash = text.find('/');
  if (slash == std::string::npos) malformed(what + " '" + text + "' (expected a/b)");
  return {static_cast<int>(parseInteger(text.substr(0, slash), what)),
          static_cast<int>(parseInteger(text.substr(slash + 1), what))};
}

}  // namespace

std::string encodeWorld(const World& world) {
  std::ostringstream out;
  out << kMagic << "\n"
      << "version " << world.version << "\n"
      << "notice " << world.notice << "\n"
      << "size " << world.members.size() << "\n";
  for (const auto& m : world.members) {
    const Identity& id = m.identity;
    out << "member " << id.rank << " " << m.worker << " " << id.localRank << "/" << id.localSize
        << " " << id.crossRank << "/" << id.crossSize << " " << m.host << "\n";
  }
  return out.str();
}

World decodeWorld(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kMagic) malformed("missing '" + std::string(kMagic) + "'");
  World world;
  int64_t size = -1;
  auto field = [&](const char* name) {
    std::string word, value;
    if (!std::getline(in, line)) malformed(std::string("missing ") + name);
    std::istringstream words(line);
    words >> word >> value;
    if (word != name) malformed(std::string("expected ") + name + ", got '" + line + "'");
    return parseInteger(value, name);
  };
  world.version = field("version");
  world.notice = field("notice");
  size = field("size");
  if (world.version < 1 || size < 1 || size > (1 << 24)) malformed("version or size out of range");
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream words(line);
    std::string word, rank, worker, local, cross;
    words >> word >> rank >> worker >> local >> cross;
    std::string host;
    std::getline(words >> std::ws, host);
    if (word != "member" || host.empty()) malformed("member line '" + line + "'");
    WorldMember m;
    m.worker = parseInteger(worker, "worker id");
    m.host = host;
    m.identity.rank = static_cast<int>(parseInteger(rank, "rank"));
    m.identity.size = static_cast<int>(size);
    std::tie(m.identity.localRank, m.identity.localSize) = parsePair(local, "local rank");
    std::tie(m.identity.crossRank, m.identity.crossSize) = parsePair(cross, "cross rank");
    if (m.identity.rank != static_cast<int>(world.members.size())) {
      malformed("rank " + rank + " out of order");
    }
    const Identity& id = m.identity;
    if (id.localRank < 0 || id.localRank >= id.localSize || id.crossRank < 0 ||
        id.crossRank >= id.crossSize) {
      malformed("local or cross rank out of range in '" + line + "'");
    }
    world.members.push_back(std::move(m));
  }
  if (static_cast<int64_t>(world.members.size()) != size) {
    malformed("size " + std::to_string(size) + " but " + std::to_string(world.members.size()) +
              " members");
  }
  return world;
}

}  // namespace kolo::elastic
