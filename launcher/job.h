// Running one job: start every rank, forward its output, watch rendezvous
// arrivals, and stop everything on the first failure, a signal or the start
// timeout. Single-threaded: everything happens on the thread calling run(),
// which must be the thread that blocked the job signals (blockJobSignals()).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "kolo/store.h"
#include "options.h"
#include "output.h"
#include "plan.h"
#include "worker_env.h"

namespace kolo::launcher {

// --output-filename's folder of one rank: "rank.N", N zero-padded to the
// digits of size - 1 so that the folders sort in rank order (as horovodrun).
std::string rankOutputDir(int rank, int size);

class Job {
 public:
  // arrivals: the job's store; a rank has arrived once "kolo/arrived/<rank>"
  // exists in it. May be null (no start timeout then).
  Job(Options options, JobPlan plan, RendezvousInfo rendezvous, std::shared_ptr<Store> arrivals,
      std::vector<std::string> inherited);
  ~Job();

  // Returns kolorun's exit status (see kolorun --help). Prints one summary
  // line on stderr when the job did not simply succeed.
  int run();

 private:
  using Clock = std::chrono::steady_clock;
  enum class Stop { kNone, kRankFailed, kStartFailed, kSpawnFailed, kSignal, kStartTimeout };

  struct Rank {
    RankPlacement placement;
    bool remote = false;
    pid_t pid = -1;  // also its process group
    int stdinFd = -1;
    int fds[2] = {-1, -1};  // stdout, stderr pipes
    std::unique_ptr<OutputForwarder> out[2];
    bool running = false;
    bool started = false;  // local: when spawned; remote: when its marker arrived
    bool arrived = false;
    int status = 0;  // wait status once reaped
  };

  void openOutputFiles();
  bool spawnAll();
  void loop();
  // Forwards what the pipe holds now: up to maxReads reads, stops at EAGAIN.
  void readFrom(Rank& rank, int stream, int maxReads = 4);
  void reap();
  void onExit(Rank& rank);
  void checkArrivals(Clock::time_point now);
  void beginStop(Stop reason, int rank, Clock::time_point now);
  void killAll(int signal, bool includeRemote);
  int finish();
  std::string describe(const Rank& rank) const;

  Options options_;
  JobPlan plan_;
  RendezvousInfo rendezvous_;
  std::shared_ptr<Store> arrivals_;
  std::vector<std::string> inherited_;
  std::vector<Rank> ranks_;
  int signalFd_ = -1;
  std::vector<int> fileFds_;  // [rank*2 + stream], -1 without --output-filename

  Clock::time_point startedAt_;
  Clock::time_point stopAt_;
  Stop stop_ = Stop::kNone;
  int stopRank_ = -1;     // the failed rank, for kRankFailed / kStartFailed / kSpawnFailed
  int stopSignal_ = 0;    // for kSignal
  int stoppedOthers_ = 0;
  std::string spawnError_;
  // kStartTimeout: the ranks that never arrived; kRankFailed: those that had
  // not arrived when a rank failed (empty for a job that never polls).
  std::vector<int> missing_;
  bool killedLocal_ = false, killedRemote_ = false;
  Clock::time_point drainUntil_{};
  bool arrivalsPending_ = true;
  Clock::time_point lastArrivalPoll_{};
};

}  // namespace kolo::launcher
