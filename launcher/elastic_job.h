// kolorun's elastic driver (--host-discovery-script, --min-np, --max-np):
// owns the host set, starts workers on free slots, hands out worlds through
// the job's store (kolo/elastic_world.h) and re-forms the world when a
// worker dies, hangs, or hosts come and go. It restarts nothing that is
// still alive.
//
// A world is formed only from workers that announced they are ready (a new
// worker waiting in kolo::init(), or a member that left the previous world),
// so a slow or broken new worker never holds the others up. Survivors get
// the lowest ranks; rank 0 is the lowest-ranked survivor and holds the state
// that every rank syncs from.
//
// Single-threaded, like Job: everything runs on the thread calling run(),
// which must have blocked the job signals (blockJobSignals()).
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "discovery.h"
#include "host_set.h"
#include "hosts.h"
#include "kolo/store.h"
#include "kolo/tcp_store.h"
#include "options.h"
#include "worker_process.h"

namespace kolo::launcher {

class ElasticJob {
 public:
  ElasticJob(Options options, LocalNames local, std::vector<std::string> inherited);
  ~ElasticJob();

  // kolorun's exit status; prints one summary line on stderr when the job did
  // not simply succeed.
  int run();

 private:
  using Clock = std::chrono::steady_clock;

  struct Worker {
    int64_t id = 0;
    std::string host;
    int slot = 0;
    bool remote = false;
    std::unique_ptr<WorkerProcess> process;
    Clock::time_point startedAt{};
    int64_t readyAfter = -1;  // elastic/ready/<id>: -1 until it announced itself
    std::string reason;       // why it left its last world
    int64_t world = 0;        // the world it is a member of (0: none yet)
    int rank = -1;            // its rank there
    bool exited = false;
    bool dropping = false;  // stopped on purpose: its exit is not a failure
    bool alive() const { return !exited; }
    // Announced itself and is not a member of a world it has not left yet.
    bool waiting() const { return readyAfter >= 0 && readyAfter >= world; }
  };

  enum class Phase { kRunning, kFinishing, kStopping };
  enum class Outcome { kSuccess, kWorkerFailed, kSignal, kTimeout, kFatal };

  // elastic_job.cc: processes, output, the loop.
  void setUpStore();
  void loop();
  void pollOnce(Clock::time_point now);
  void reap(Clock::time_point now);
  void onWorkerExit(Worker& w, Clock::time_point now);
  void readReadiness();
  void startWorkers(Clock::time_point now);
  void startWorker(const std::string& host, int slot, Clock::time_point now);
  std::string storeAddressFor(const std::string& host, bool remote);
  void checkStartTimeouts(Clock::time_point now);
  void runDiscovery(Clock::time_point now);
  void onDiscovery(const DiscoveryScript::Result& result, Clock::time_point now);
  void stopEverything(Outcome outcome, int code, const std::string& line, Clock::time_point now);
  void escalateStop(Clock::time_point now);
  int finish();

  // elastic_world.cc: worlds.
  void manageWorld(Clock::time_point now);
  void formWorld(Clock::time_point now);
  void issueNotice(const std::string& why);
  void enterFinishing(const Worker& w, Clock::time_point now);
  void checkBelowMin(size_t have, Clock::time_point now, const std::string& what);
  std::vector<Worker*> members();
  int aliveCount() const;
  int occupied(const std::string& host) const;
  void fail(const Worker& w, const std::string& what, Clock::time_point now);
  std::string describe(const Worker& w) const;
  void say(const std::string& line) const;

  Options options_;
  LocalNames local_;
  std::vector<std::string> inherited_;
  std::string localProgram_;
  std::string cwd_;
  HostSet hosts_;
  std::unique_ptr<DiscoveryScript> discovery_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
  std::string secret_;
  std::map<std::string, std::string> routeAddress_;  // remote host -> store address
  int signalFd_ = -1;

  std::vector<std::unique_ptr<Worker>> workers_;
  int64_t nextWorkerId_ = 0;

  // The current world.
  int64_t world_ = 0;
  int worldSize_ = 0;
  int64_t notice_ = 0;          // elastic/notice
  bool noticed_ = false;        // a notice is out for the current world
  Clock::time_point noticedAt_{};
  std::optional<Clock::time_point> brokenAt_;  // a member died or left
  std::optional<Clock::time_point> belowMinSince_;
  int resets_ = 0;
  bool everFormed_ = false;

  Phase phase_ = Phase::kRunning;
  Outcome outcome_ = Outcome::kSuccess;
  int exitCode_ = 0;
  std::string summary_;  // the last line kolorun prints
  std::string textOfFinish_;  // who finished first
  Clock::time_point startedAt_{};
  Clock::time_point stopAt_{};
  bool killedLocal_ = false, killedRemote_ = false;
  Clock::time_point nextDiscovery_{};
  std::chrono::milliseconds hangTimeout_{60000};
};

// kolorun's entry point for an elastic job.
int runElasticJob(const Options& options);

}  // namespace kolo::launcher
