#include "plan.h"

#include <algorithm>

#include "remote.h"
#include "usage_error.h"

namespace kolo::launcher {

JobPlan makePlan(const Options& options, const LocalNames& local, const std::string& pathVar) {
  std::vector<HostSlots> hosts;
  if (!options.hosts.empty()) {
    hosts = parseHostList(options.hosts);
  } else if (!options.hostfile.empty()) {
    hosts = readHostfile(options.hostfile);
  } else {
    hosts = {{"localhost", options.np}};
  }
  int np = options.np;
  if (np == 0) {
    for (const auto& h : hosts) np += h.slots;
  }

  JobPlan plan;
  plan.ranks = assignRanks(hosts, np);
  for (const auto& r : plan.ranks) {
    bool remote = !isLocalHost(r.host, local);
    plan.remote.push_back(remote);
    if (remote && std::find(plan.remoteHosts.begin(), plan.remoteHosts.end(), r.host) ==
                      plan.remoteHosts.end()) {
      plan.remoteHosts.push_back(r.host);
    }
  }
  bool anyLocal = std::find(plan.remote.begin(), plan.remote.end(), false) != plan.remote.end();
  if (anyLocal) {
    const std::string& program = options.command.front();
    auto found = findProgram(program, pathVar);
    if (!found) {
      throw UsageError("program '" + program + "' not found" +
                       (program.find('/') == std::string::npos ? " on PATH" : "") +
                       " or not executable; check the name or give its path");
    }
    plan.localProgram = *found;
  }
  return plan;
}

RankCommand rankCommand(const Options& options, const JobPlan& plan, int rank,
                        const RendezvousInfo& rendezvous,
                        const std::vector<std::string>& inherited, const std::string& cwd) {
  const RankPlacement& placement = plan.ranks.at(rank);
  EnvList env = jobEnv(options, inherited, placement, rendezvous);
  return workerCommand(options, placement.host, plan.remote.at(rank), env, plan.localProgram,
                       inherited, cwd);
}

RankCommand workerCommand(const Options& options, const std::string& host, bool remote,
                          const EnvList& env, const std::string& localProgram,
                          const std::vector<std::string>& inherited, const std::string& cwd) {
  RankCommand cmd;
  if (!remote) {
    cmd.spawn.path = localProgram;
    cmd.spawn.argv = options.command;
    cmd.spawn.env = localWorkerEnv(inherited, env);
    return cmd;
  }
  RemoteShell shell = remoteShellFor(options);
  cmd.spawn.argv = remoteArgv(shell, host);
  std::string pathVar;
  for (const auto& e : inherited) {
    if (e.rfind("PATH=", 0) == 0) pathVar = e.substr(5);
  }
  auto found = findProgram(shell.prefix.front(), pathVar);
  if (!found) {
    throw UsageError("remote shell '" + shell.prefix.front() + "' not found on PATH; install " +
                     "it or give another with --rsh");
  }
  cmd.spawn.path = *found;
  // The remote shell itself runs with kolorun's environment minus the
  // secret; the worker's variables travel in the script.
  std::vector<std::string> shellEnv;
  for (const auto& e : inherited) {
    if (e.rfind("KOLO_SECRET_KEY=", 0) != 0) shellEnv.push_back(e);
  }
  cmd.spawn.env = shellEnv;
  cmd.spawn.stdinPipe = true;
  RemoteLaunch launch;
  launch.host = host;
  launch.cwd = cwd;
  launch.env = remoteWorkerEnv(inherited, env);
  launch.command = options.command;
  launch.graceSeconds = options.graceSeconds;
  cmd.stdinScript = remoteScript(launch);
  return cmd;
}

std::string remoteShellName(const Options& options) {
  return options.rsh.empty() ? "ssh" : options.rsh;
}

}  // namespace kolo::launcher
