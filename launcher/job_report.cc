// The end of a job: its exit status and the one line that explains it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "common/ranks_text.h"
#include "job.h"
#include "usage_error.h"

namespace kolo::launcher {
namespace {

constexpr int kStartTimeoutExitCode = 124;

std::string signalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string plural(int n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// "ranks 2,3 (host h2), rank 5 (host h3)".
std::string groupByHost(const std::vector<int>& ranks, const std::vector<RankPlacement>& where) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r : ranks) {
    if (groups.empty() || groups.back().first != where[r].host) groups.push_back({where[r].host, {}});
    groups.back().second.push_back(r);
  }
  std::string out;
  for (const auto& [host, list] : groups) {
    if (!out.empty()) out += ", ";
    out += (list.size() == 1 ? "rank " : "ranks ") + joinRanks(list, ",") + " (host " + host + ")";
  }
  return out;
}

}  // namespace

std::string Job::describe(const Rank& rank) const {
  return "rank " + std::to_string(rank.placement.rank) + " (host " + rank.placement.host + ")";
}

int Job::finish() {
  for (auto& r : ranks_) {
    for (int k = 0; k < 2; ++k) {
      if (r.out[k]) r.out[k]->finish();
    }
  }
  std::string others = stoppedOthers_ == 0 ? "no other rank was running"
                                           : "stopped the other " + plural(stoppedOthers_, "rank");
  std::string line;
  int code = 0;
  switch (stop_) {
    case Stop::kNone:
      return 0;
    case Stop::kRankFailed: {
      const Rank& r = ranks_[stopRank_];
      if (WIFSIGNALED(r.status)) {
        int sig = WTERMSIG(r.status);
        line = describe(r) + " was killed by " + signalName(sig) + " (" + strsignal(sig) + ")";
        code = 128 + sig;
      } else {
        code = WEXITSTATUS(r.status);
        line = describe(r) + " exited with code " + std::to_string(code);
        if (r.remote && code > 128 && code < 128 + NSIG) {
          line += " (" + signalName(code - 128) + " on the remote host?)";
        }
      }
      if (!missing_.empty()) {
        line += "; " + groupByHost(missing_, plan_.ranks) + " had not reached rendezvous";
      }
      line += "; " + others;
      break;
    }
    case Stop::kStartFailed: {
      const Rank& r = ranks_[stopRank_];
      std::string shell = options_.rsh.empty() ? "ssh" : options_.rsh;
      std::string said = r.out[1] ? r.out[1]->lastLine() : "";
      std::string how = WIFEXITED(r.status) ? "exit code " + std::to_string(WEXITSTATUS(r.status))
                                            : signalName(WTERMSIG(r.status));
      line = "could not start " + describe(r) + " through '" + shell + "' (" + how + ")" +
             (said.empty() ? "" : ": " + said) + "; check that '" + shell + " " +
             r.placement.host + " true' works" +
             (options_.rsh.empty() ? " without a password prompt (BatchMode), or pass --rsh" : "") +
             "; " + others;
      code = kUsageExitCode;
      break;
    }
    case Stop::kSpawnFailed:
      line = "could not start " + describe(ranks_[stopRank_]) + ": " + spawnError_ + "; " +
             (stoppedOthers_ == 0 ? "nothing else was started"
                                  : "stopped the " + plural(stoppedOthers_, "rank") +
                                        " already started");
      code = kUsageExitCode;
      break;
    case Stop::kSignal:
      line = "got " + signalName(stopSignal_) + "; stopped " + plural(stoppedOthers_, "rank");
      code = 128 + stopSignal_;
      break;
    case Stop::kStartTimeout: {
      line = groupByHost(missing_, plan_.ranks) + " did not reach rendezvous within " +
             formatNumber(options_.startTimeoutSeconds) + " s; stopped the job (" +
             plural(stoppedOthers_, "rank") +
             " running; programs that never call kolo::init() nor create a \"kolo\" process group "
             "need --start-timeout 0)";
      code = kStartTimeoutExitCode;
      break;
    }
  }
  if (options_.verbose) {
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - stopAt_);
    line += " [stop took " + std::to_string(took.count()) + " ms]";
  }
  writeAll(STDERR_FILENO, "kolorun: " + line + "\n");
  return code;
}

}  // namespace kolo::launcher
