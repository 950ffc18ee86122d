// ElasticJob: set-up, worker processes, discovery and the loop. Worlds are
// managed in elastic_world.cc.
#include "elastic_job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <system_error>

#include "kolo/config.h"
#include "kolo/elastic_world.h"
#include "network.h"
#include "process.h"
#include "usage_error.h"

namespace kolo::launcher {
namespace {

constexpr auto kLoopPoll = std::chrono::milliseconds(50);
constexpr auto kDrainTime = std::chrono::seconds(2);
constexpr auto kRemoteExtraGrace = std::chrono::seconds(2);
constexpr auto kDiscoveryTimeout = std::chrono::seconds(30);

std::chrono::milliseconds seconds(double s) {
  return std::chrono::milliseconds(static_cast<long long>(s * 1000.0));
}

std::string signalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

void makeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string partial = path.substr(0, i);
      if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        throw UsageError("--output-filename: cannot create '" + partial +
                         "': " + std::strerror(errno) + "; choose a writable directory");
      }
    }
  }
}

}  // namespace

ElasticJob::ElasticJob(Options options, LocalNames local, std::vector<std::string> inherited)
    : options_(std::move(options)),
      local_(std::move(local)),
      inherited_(std::move(inherited)),
      hosts_(options_.blacklistCooldownRange) {
  char cwd[4096] = {};
  cwd_ = getcwd(cwd, sizeof(cwd) - 1) != nullptr ? cwd : ".";
  std::string pathVar = "/usr/bin:/bin";
  for (const auto& e : inherited_) {
    if (e.rfind("PATH=", 0) == 0) pathVar = e.substr(5);
  }
  if (auto found = findProgram(options_.command.front(), pathVar)) localProgram_ = *found;

  // Workers must call a silent peer failed after the same time as their
  // engines do (KOLO_TIMEOUT): that is how long a member may take to leave
  // a broken world before the driver calls it hung.
  if (options_.timeoutSeconds) {
    hangTimeout_ = seconds(*options_.timeoutSeconds);
  } else {
    try {
      hangTimeout_ = Config::fromEnv().timeout;
    } catch (const std::exception& e) {
      throw UsageError(e.what());
    }
  }

  if (!options_.hostDiscoveryScript.empty()) {
    auto timeout = std::min<std::chrono::milliseconds>(kDiscoveryTimeout,
                                                       seconds(options_.elasticTimeoutSeconds));
    discovery_ = std::make_unique<DiscoveryScript>(
        options_.hostDiscoveryScript, options_.slotsPerHost > 0 ? options_.slotsPerHost : 1,
        timeout, inherited_);
    DiscoveryScript::Result first = discovery_->runNow();
    if (!first.ok) throw UsageError(first.error + " (the first discovery must succeed)");
    hosts_.update(first.hosts);
  } else {
    std::vector<HostSlots> fixed = !options_.hosts.empty() ? parseHostList(options_.hosts)
                                                           : readHostfile(options_.hostfile);
    int total = 0;
    for (const auto& h : fixed) total += h.slots;
    if (options_.np > total) {
      throw UsageError("-np " + std::to_string(options_.np) +
                       " needs more slots than the hosts have (" + std::to_string(total) + ": " +
                       describeHosts(fixed) + "); add hosts or slots, or lower -np");
    }
    hosts_.update(fixed);
  }
  bool anyLocal = false;
  for (const auto& h : hosts_.order()) anyLocal = anyLocal || isLocalHost(h, local_);
  if (anyLocal && localProgram_.empty()) {
    const std::string& program = options_.command.front();
    throw UsageError("program '" + program + "' not found" +
                     (program.find('/') == std::string::npos ? " on PATH" : "") +
                     " or not executable; check the name or give its path");
  }
  setUpStore();
}

ElasticJob::~ElasticJob() {
  if (signalFd_ >= 0) close(signalFd_);
}

void ElasticJob::setUpStore() {
  // With a discovery script, hosts (remote ones too) may appear later: the
  // store listens on every interface (every connection is authenticated).
  bool allLocal = discovery_ == nullptr;
  for (const auto& h : hosts_.order()) allLocal = allLocal && isLocalHost(h, local_);
  RendezvousEndpoint endpoint{allLocal ? "127.0.0.1" : "", "127.0.0.1"};
  secret_ = randomSecret();
  server_ = serveRendezvous(endpoint, options_.port, secret_);
  store_ = server_->localStore();
}

std::string ElasticJob::storeAddressFor(const std::string& host, bool remote) {
  if (!options_.networkInterface.empty()) return interfaceAddress(options_.networkInterface);
  std::string target;
  if (remote) {
    target = networkName(host);
  } else {
    // A local worker in a world with remote members must reach the store
    // (and be reached) over a real interface, not loopback.
    for (const auto& h : hosts_.order()) {
      if (!isLocalHost(h, local_)) {
        target = networkName(h);
        break;
      }
    }
    if (target.empty()) return "127.0.0.1";
  }
  auto it = routeAddress_.find(target);
  if (it == routeAddress_.end()) {
    it = routeAddress_.emplace(target, routeSourceAddress(target)).first;
  }
  return it->second;
}

int ElasticJob::run() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&mask, sig);
  signalFd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signalFd_ < 0) throw std::system_error(errno, std::generic_category(), "signalfd");
  startedAt_ = Clock::now();
  nextDiscovery_ = startedAt_ + seconds(options_.discoveryIntervalSeconds);
  if (options_.verbose) {
    say("elastic driver: -np " + std::to_string(options_.np) + ", --min-np " +
        std::to_string(options_.minNp) + ", --max-np " + std::to_string(options_.maxNp) +
        "; hosts " + hosts_.describe(startedAt_) + "; store on port " +
        std::to_string(server_->port()));
  }
  loop();
  return finish();
}

void ElasticJob::loop() {
  std::optional<Clock::time_point> drainUntil;
  for (;;) {
    auto now = Clock::now();
    reap(now);
    readReadiness();
    now = Clock::now();
    if (phase_ == Phase::kStopping) {
      escalateStop(now);
    } else {
      if (discovery_) {
        discovery_->enforceTimeout(now);
        runDiscovery(now);
      }
      if (phase_ == Phase::kRunning) {
        checkStartTimeouts(now);
        startWorkers(now);
        manageWorld(now);
      }
    }
    bool anyAlive = aliveCount() > 0;
    if (!anyAlive && phase_ != Phase::kRunning) {
      if (!drainUntil) drainUntil = now + kDrainTime;
      bool open = std::any_of(workers_.begin(), workers_.end(),
                              [](const auto& w) { return w->process->outputOpen(); });
      if (!open || now >= *drainUntil) return;
    }
    pollOnce(now);
  }
}

void ElasticJob::pollOnce(Clock::time_point now) {
  std::vector<pollfd> fds;
  fds.push_back({signalFd_, POLLIN, 0});
  for (const auto& w : workers_) w->process->pollFds(fds);
  if (discovery_) discovery_->pollFds(fds);
  int timeoutMs = static_cast<int>(kLoopPoll.count());
  (void)now;
  if (poll(fds.data(), fds.size(), timeoutMs) < 0 && errno != EINTR) {
    throw std::system_error(errno, std::generic_category(), "poll");
  }
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    if (discovery_ && discovery_->owns(fds[i].fd)) {
      discovery_->readFrom(fds[i].fd);
      continue;
    }
    for (auto& w : workers_) {
      if (w->process->owns(fds[i].fd)) {
        w->process->readFrom(fds[i].fd);
        break;
      }
    }
  }
  if (fds[0].revents & POLLIN) {
    signalfd_siginfo info{};
    while (read(signalFd_, &info, sizeof(info)) == sizeof(info)) {
      int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) continue;  // reaped at the top of the loop
      if (phase_ != Phase::kStopping) {
        stopEverything(Outcome::kSignal, 128 + sig,
                       "got " + signalName(sig) + "; stopped " + std::to_string(aliveCount()) +
                           " worker" + (aliveCount() == 1 ? "" : "s"),
                       Clock::now());
      } else {
        for (auto& w : workers_) {
          if (w->alive()) w->process->kill(SIGKILL);  // asked twice: no more grace
        }
        killedLocal_ = killedRemote_ = true;
      }
    }
  }
}

void ElasticJob::reap(Clock::time_point now) {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    if (discovery_ && pid == discovery_->pid()) {
      onDiscovery(discovery_->exited(status), now);
      continue;
    }
    for (auto& w : workers_) {
      if (w->process->pid() == pid && w->alive()) {
        w->process->exited(status);
        w->exited = true;
        onWorkerExit(*w, now);
      }
    }
  }
}

void ElasticJob::readReadiness() {
  for (auto& w : workers_) {
    if (!w->alive()) continue;
    try {
      if (!store_->check(elastic::keys::ready(w->id))) continue;
      int64_t v = elastic::integerOf(store_->get(elastic::keys::ready(w->id), seconds(1)),
                                     elastic::keys::ready(w->id));
      if (v == w->readyAfter) continue;
      w->readyAfter = v;
      if (store_->check(elastic::keys::reason(w->id))) {
        w->reason = elastic::textOf(store_->get(elastic::keys::reason(w->id), seconds(1)));
      }
      if (options_.verbose) {
        say(describe(*w) + (v == 0 ? " is ready" : " left world " + std::to_string(v)) +
            (w->reason.empty() ? "" : ": " + w->reason));
      }
    } catch (const std::exception&) {
      // The store is in this process; a failure means it is shutting down.
    }
  }
}

void ElasticJob::startWorkers(Clock::time_point now) {
  if (phase_ != Phase::kRunning) return;
  if (!everFormed_ && workers_.empty()) {
    // Horovod's rule: the job starts once -np slots are available.
    int available = hosts_.availableSlots(now);
    if (available < options_.np) {
      checkBelowMin(static_cast<size_t>(available), now,
                    std::to_string(options_.np) + " slots (-np " + std::to_string(options_.np) +
                        ") to start with");
      return;
    }
    belowMinSince_.reset();
  }
  for (const auto& host : hosts_.order()) {
    if (!hosts_.available(host, now)) continue;
    while (aliveCount() < options_.maxNp && occupied(host) < hosts_.slots(host)) {
      std::vector<bool> used(static_cast<size_t>(hosts_.slots(host)), false);
      for (const auto& w : workers_) {
        if (w->alive() && w->host == host && w->slot < static_cast<int>(used.size())) {
          used[static_cast<size_t>(w->slot)] = true;
        }
      }
      int slot = static_cast<int>(std::find(used.begin(), used.end(), false) - used.begin());
      size_t before = workers_.size();
      startWorker(host, slot, now);
      if (workers_.size() == before || !hosts_.available(host, now)) break;  // it failed
    }
  }
}

void ElasticJob::startWorker(const std::string& host, int slot, Clock::time_point now) {
  auto w = std::make_unique<Worker>();
  w->id = nextWorkerId_++;
  w->host = host;
  w->slot = slot;
  w->remote = !isLocalHost(host, local_);
  w->startedAt = now;
  try {
    RendezvousInfo rv{storeAddressFor(host, w->remote), server_->port(), secret_};
    EnvList env = elasticWorkerEnv(options_, inherited_, w->id, host, rv);
    if (!w->remote && localProgram_.empty()) {
      throw UsageError("program '" + options_.command.front() + "' not found on this machine");
    }
    RankCommand cmd = workerCommand(options_, host, w->remote, env, localProgram_, inherited_, cwd_);
    int files[2] = {-1, -1};
    if (!options_.outputDir.empty()) {
      std::string dir = options_.outputDir + "/worker." + std::to_string(w->id);
      makeDirs(dir);
      for (int s = 0; s < 2; ++s) {
        std::string file = dir + (s == 0 ? "/stdout" : "/stderr");
        files[s] = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      }
    }
    w->process = std::make_unique<WorkerProcess>(static_cast<int>(w->id), cmd, w->remote, files,
                                                 options_.prefixTimestamp);
  } catch (const std::exception& e) {
    fail(*w, "could not be started: " + std::string(e.what()), now);
    return;
  }
  if (options_.verbose) {
    say("started " + describe(*w) + (w->remote ? " (remote)" : " (local)"));
  }
  workers_.push_back(std::move(w));
}

void ElasticJob::checkStartTimeouts(Clock::time_point now) {
  if (options_.startTimeoutSeconds <= 0) return;
  for (auto& w : workers_) {
    if (!w->alive() || w->dropping || w->readyAfter >= 0) continue;
    if (now - w->startedAt < seconds(options_.startTimeoutSeconds)) continue;
    fail(*w, "did not reach kolo::init() within " + formatNumber(options_.startTimeoutSeconds) +
                 " s (--start-timeout); killed it", now);
    w->dropping = true;
    w->process->kill(SIGKILL);
  }
}

void ElasticJob::runDiscovery(Clock::time_point now) {
  if (discovery_->running() || now < nextDiscovery_) return;
  nextDiscovery_ = now + seconds(options_.discoveryIntervalSeconds);
  try {
    discovery_->start(now);
  } catch (const std::exception& e) {
    say("discovery: cannot run the script: " + std::string(e.what()) +
        "; keeping the last host list");
  }
}

void ElasticJob::onDiscovery(const DiscoveryScript::Result& result, Clock::time_point now) {
  if (!result.ok) {
    say("discovery: " + result.error + "; keeping the last host list");
    return;
  }
  HostSet::Change change = hosts_.update(result.hosts);
  if (!change.any()) return;
  say("hosts now " + hosts_.describe(now));
  // Workers that are not members of the current world go at once when their
  // host is gone; members leave with the next world (see manageWorld).
  for (auto& w : workers_) {
    if (w->alive() && !w->dropping && !hosts_.listed(w->host) &&
        (w->world != world_ || world_ == 0)) {
      w->dropping = true;
      w->process->stop();
    }
  }
}

void ElasticJob::stopEverything(Outcome outcome, int code, const std::string& line,
                                Clock::time_point now) {
  if (phase_ == Phase::kStopping) return;
  phase_ = Phase::kStopping;
  outcome_ = outcome;
  exitCode_ = code;
  summary_ = line;
  stopAt_ = now;
  try {
    store_->set(elastic::keys::kFinished, elastic::textValue("kolorun is stopping the job"));
  } catch (...) {
  }
  for (auto& w : workers_) {
    if (w->alive()) {
      w->dropping = true;
      w->process->stop();
    }
  }
}

void ElasticJob::escalateStop(Clock::time_point now) {
  if (!killedLocal_ && now >= stopAt_ + seconds(options_.graceSeconds)) {
    for (auto& w : workers_) {
      if (w->alive() && !w->remote) w->process->kill(SIGKILL);
    }
    killedLocal_ = true;
  }
  if (!killedRemote_ && now >= stopAt_ + seconds(options_.graceSeconds) + kRemoteExtraGrace) {
    for (auto& w : workers_) {
      if (w->alive()) w->process->kill(SIGKILL);
    }
    killedRemote_ = true;
  }
}

int ElasticJob::finish() {
  for (auto& w : workers_) w->process->flush();
  if (!summary_.empty()) {
    if (options_.verbose && phase_ == Phase::kStopping) {
      auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - stopAt_);
      summary_ += " [stop took " + std::to_string(took.count()) + " ms]";
    }
    say(summary_);
  }
  return exitCode_;
}

int ElasticJob::aliveCount() const {
  return static_cast<int>(std::count_if(workers_.begin(), workers_.end(),
                                        [](const auto& w) { return w->alive(); }));
}

int ElasticJob::occupied(const std::string& host) const {
  return static_cast<int>(std::count_if(workers_.begin(), workers_.end(), [&](const auto& w) {
    return w->alive() && w->host == host;
  }));
}

void ElasticJob::say(const std::string& line) const {
  writeAll(STDERR_FILENO, "kolorun: " + line + "\n");
}

int runElasticJob(const Options& options) {
  ElasticJob job(options, localNames(), currentEnvironment());
  return job.run();
}

}  // namespace kolo::launcher
