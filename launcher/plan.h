// What a job will start, decided before anything starts: where each rank
// runs, whether it is local, and the exact process (argv, env, stdin script)
// for each rank. Everything here can fail with UsageError; nothing here
// starts a process.
#pragma once

#include <string>
#include <vector>

#include "hosts.h"
#include "options.h"
#include "process.h"
#include "worker_env.h"

namespace kolo::launcher {

struct JobPlan {
  std::vector<RankPlacement> ranks;
  std::vector<bool> remote;              // per rank
  std::vector<std::string> remoteHosts;  // distinct, in rank order
  std::string localProgram;              // resolved path when a rank is local
};

// Hosts from -H / --hostfile (default localhost:np), ranks assigned, local
// ranks' program found on pathVar.
JobPlan makePlan(const Options& options, const LocalNames& local, const std::string& pathVar);

struct RankCommand {
  SpawnSpec spawn;
  std::string stdinScript;  // remote ranks: written to the remote shell's stdin
};

// The process kolorun starts for one rank: the program itself (local) or the
// remote shell (remote), never with the secret on its command line.
RankCommand rankCommand(const Options& options, const JobPlan& plan, int rank,
                        const RendezvousInfo& rendezvous,
                        const std::vector<std::string>& inherited, const std::string& cwd);

// The same for any worker on `host` with its environment `env` (the
// elastic driver's workers, whose identity is not a fixed rank).
RankCommand workerCommand(const Options& options, const std::string& host, bool remote,
                          const EnvList& env, const std::string& localProgram,
                          const std::vector<std::string>& inherited, const std::string& cwd);

// How ranks start on a host, for messages: "ssh" or the --rsh command.
std::string remoteShellName(const Options& options);

}  // namespace kolo::launcher
