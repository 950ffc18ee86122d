#include "worker_env.h"

#include <cstddef>
#include <map>

extern char** environ;

namespace kolo::launcher {
namespace {

std::string nameOf(const std::string& entry) { return entry.substr(0, entry.find('=')); }

// Keeps the last value of each name, in first-seen order.
EnvList dedupe(const EnvList& list) {
  EnvList out;
  std::map<std::string, size_t> index;
  for (const auto& [name, value] : list) {
    auto it = index.find(name);
    if (it == index.end()) {
      index[name] = out.size();
      out.emplace_back(name, value);
    } else {
      out[it->second].second = value;
    }
  }
  return out;
}

}  // namespace

EnvList identityEnv(const RankPlacement& r, const RendezvousInfo& rv) {
  return {
      {"KOLO_RANK", std::to_string(r.rank)},
      {"KOLO_SIZE", std::to_string(r.size)},
      {"KOLO_LOCAL_RANK", std::to_string(r.localRank)},
      {"KOLO_LOCAL_SIZE", std::to_string(r.localSize)},
      {"KOLO_CROSS_RANK", std::to_string(r.crossRank)},
      {"KOLO_CROSS_SIZE", std::to_string(r.crossSize)},
      {"KOLO_HOSTNAME", r.host},
      {"KOLO_RENDEZVOUS_ADDR", rv.addr},
      {"KOLO_RENDEZVOUS_PORT", std::to_string(rv.port)},
      {"KOLO_SECRET_KEY", rv.secret},
  };
}

EnvList torchEnv(const RankPlacement& r, const RendezvousInfo& rv) {
  if (rv.torchPort == 0) return {};
  return {
      {"RANK", std::to_string(r.rank)},
      {"WORLD_SIZE", std::to_string(r.size)},
      {"LOCAL_RANK", std::to_string(r.localRank)},
      {"LOCAL_WORLD_SIZE", std::to_string(r.localSize)},
      {"GROUP_RANK", std::to_string(r.crossRank)},
      {"MASTER_ADDR", rv.torchAddr},
      {"MASTER_PORT", std::to_string(rv.torchPort)},
  };
}

namespace {

// -x NAME=VALUE and -x NAME (taken from `inherited`), then the tuning flags.
EnvList exportedEnv(const Options& options, const std::vector<std::string>& inherited) {
  EnvList env;
  for (const auto& x : options.exportEnv) {
    size_t eq = x.find('=');
    if (eq != std::string::npos) {
      env.emplace_back(x.substr(0, eq), x.substr(eq + 1));
      continue;
    }
    for (const auto& entry : inherited) {
      if (nameOf(entry) == x) env.emplace_back(x, entry.substr(x.size() + 1));
    }
  }
  for (auto& kv : tuningEnv(options)) env.push_back(std::move(kv));
  return env;
}

}  // namespace

EnvList jobEnv(const Options& options, const std::vector<std::string>& inherited,
               const RankPlacement& rank, const RendezvousInfo& rendezvous) {
  EnvList env = torchEnv(rank, rendezvous);
  for (auto& kv : exportedEnv(options, inherited)) env.push_back(std::move(kv));
  for (auto& kv : identityEnv(rank, rendezvous)) env.push_back(std::move(kv));
  return dedupe(env);
}

EnvList elasticWorkerEnv(const Options& options, const std::vector<std::string>& inherited,
                         int64_t worker, const std::string& host,
                         const RendezvousInfo& rendezvous) {
  EnvList env = exportedEnv(options, inherited);
  env.emplace_back("KOLO_ELASTIC_WORKER", std::to_string(worker));
  env.emplace_back("KOLO_HOSTNAME", host);
  env.emplace_back("KOLO_RENDEZVOUS_ADDR", rendezvous.addr);
  env.emplace_back("KOLO_RENDEZVOUS_PORT", std::to_string(rendezvous.port));
  env.emplace_back("KOLO_SECRET_KEY", rendezvous.secret);
  return dedupe(env);
}

std::vector<std::string> localWorkerEnv(const std::vector<std::string>& inherited,
                                        const EnvList& overrides) {
  EnvList all;
  for (const auto& entry : inherited) {
    if (entry.find('=') == std::string::npos) continue;
    all.emplace_back(nameOf(entry), entry.substr(entry.find('=') + 1));
  }
  for (const auto& kv : overrides) all.push_back(kv);
  std::vector<std::string> out;
  for (const auto& [name, value] : dedupe(all)) out.push_back(name + "=" + value);
  return out;
}

EnvList remoteWorkerEnv(const std::vector<std::string>& inherited, const EnvList& overrides) {
  EnvList all;
  for (const auto& entry : inherited) {
    // kolo's settings and their Horovod aliases (Config reads both).
    const bool setting = entry.rfind("KOLO_", 0) == 0 || entry.rfind("HOROVOD_", 0) == 0;
    if (!setting || entry.find('=') == std::string::npos) continue;
    all.emplace_back(nameOf(entry), entry.substr(entry.find('=') + 1));
  }
  for (const auto& kv : overrides) all.push_back(kv);
  return dedupe(all);
}

std::vector<std::string> currentEnvironment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

}  // namespace kolo::launcher
