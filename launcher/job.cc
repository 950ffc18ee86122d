#include "job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <system_error>

#include "remote.h"
#include "usage_error.h"

namespace kolo::launcher {
namespace {

constexpr auto kArrivalPoll = std::chrono::milliseconds(100);
// How long output pipes may stay open after every rank was reaped (held by
// a process that escaped its group).
constexpr auto kDrainTime = std::chrono::seconds(2);
// Remote ranks stop themselves (watchdog on stdin EOF) within the grace
// period; their remote shell is killed this much later.
constexpr auto kRemoteExtraGrace = std::chrono::seconds(2);

std::chrono::milliseconds seconds(double s) {
  return std::chrono::milliseconds(static_cast<long long>(s * 1000.0));
}

void closeFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

void makeDirs(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      partial = path.substr(0, i);
      if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        throw UsageError("--output-filename: cannot create '" + partial +
                         "': " + std::strerror(errno) + "; choose a writable directory");
      }
    }
  }
}

}  // namespace

Job::Job(Options options, JobPlan plan, RendezvousInfo rendezvous,
         std::shared_ptr<Store> arrivals, std::vector<std::string> inherited)
    : options_(std::move(options)),
      plan_(std::move(plan)),
      rendezvous_(std::move(rendezvous)),
      arrivals_(std::move(arrivals)),
      inherited_(std::move(inherited)),
      ranks_(plan_.ranks.size()) {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    ranks_[i].placement = plan_.ranks[i];
    ranks_[i].remote = plan_.remote[i];
  }
}

Job::~Job() {
  for (auto& r : ranks_) {
    closeFd(r.stdinFd);
    closeFd(r.fds[0]);
    closeFd(r.fds[1]);
  }
  closeFd(signalFd_);
}

std::string rankOutputDir(int rank, int size) {
  const size_t width = std::to_string(std::max(size - 1, 0)).size();
  std::string n = std::to_string(rank);
  return "rank." + std::string(n.size() < width ? width - n.size() : 0, '0') + n;
}

void Job::openOutputFiles() {
  fileFds_.assign(ranks_.size() * 2, -1);
  if (options_.outputDir.empty()) return;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    std::string dir = options_.outputDir + "/" +
                      rankOutputDir(static_cast<int>(i), static_cast<int>(ranks_.size()));
    makeDirs(dir);
    for (int s = 0; s < 2; ++s) {
      std::string file = dir + (s == 0 ? "/stdout" : "/stderr");
      int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) {
        throw UsageError("--output-filename: cannot write '" + file +
                         "': " + std::strerror(errno));
      }
      fileFds_[i * 2 + s] = fd;
    }
  }
}

int Job::run() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&mask, sig);
  signalFd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signalFd_ < 0) throw std::system_error(errno, std::generic_category(), "signalfd");
  openOutputFiles();

  if (options_.verbose) {
    std::string text;
    for (const auto& r : ranks_) {
      const auto& p = r.placement;
      text += "kolorun: rank " + std::to_string(p.rank) + " on " + p.host +
              (r.remote ? " (remote)" : " (local)") + ": local rank " +
              std::to_string(p.localRank) + "/" + std::to_string(p.localSize) +
              ", cross rank " + std::to_string(p.crossRank) + "/" +
              std::to_string(p.crossSize) + "\n";
    }
    text += "kolorun: rendezvous store at " + rendezvous_.addr + ":" +
            std::to_string(rendezvous_.port) + "\n";
    writeAll(STDERR_FILENO, text);
  }

  startedAt_ = Clock::now();
  spawnAll();
  loop();
  return finish();
}

bool Job::spawnAll() {
  char cwd[4096] = {};
  if (getcwd(cwd, sizeof(cwd) - 1) == nullptr) std::strcpy(cwd, ".");
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    try {
      RankCommand cmd = rankCommand(options_, plan_, static_cast<int>(i), rendezvous_,
                                    inherited_, cwd);
      Spawned s = spawnProcess(cmd.spawn);
      r.pid = s.pid;
      r.fds[0] = s.stdoutFd;
      r.fds[1] = s.stderrFd;
      r.stdinFd = s.stdinFd;
      r.running = true;
      r.started = !r.remote;
      for (int k = 0; k < 2; ++k) {
        r.out[k] = std::make_unique<OutputForwarder>(
            static_cast<int>(i), k == 0 ? StreamKind::kStdout : StreamKind::kStderr,
            k == 0 ? STDOUT_FILENO : STDERR_FILENO, fileFds_[i * 2 + k],
            options_.prefixTimestamp);
        fileFds_[i * 2 + k] = -1;  // owned by the forwarder now
      }
      if (r.remote) {
        r.out[0]->interceptMarker(kRemoteStartedMarker, [&r] { r.started = true; });
        // The script is a few KiB, far below a pipe's capacity: this write
        // completes at once even though the pipe is non-blocking. It fails
        // only when the remote shell is already gone (e.g. ssh could not
        // connect); reaping it reports that with what it printed.
        if (!writeAll(r.stdinFd, cmd.stdinScript)) closeFd(r.stdinFd);
      }
    } catch (const std::exception& e) {
      spawnError_ = e.what();
      beginStop(Stop::kSpawnFailed, static_cast<int>(i), Clock::now());
      return false;
    }
  }
  return true;
}

void Job::loop() {
  for (;;) {
    reap();
    auto now = Clock::now();
    bool anyRunning = std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
    if (!anyRunning) {
      if (drainUntil_ == Clock::time_point{}) {
        // Whatever a finished rank left in its group goes now.
        killAll(SIGKILL, true);
        drainUntil_ = now + kDrainTime;
      }
      bool open = std::any_of(ranks_.begin(), ranks_.end(),
                              [](const Rank& r) { return r.fds[0] >= 0 || r.fds[1] >= 0; });
      if (!open || now >= drainUntil_) return;
    }
    checkArrivals(now);
    if (stop_ != Stop::kNone && anyRunning) {
      if (!killedLocal_ && now >= stopAt_ + seconds(options_.graceSeconds)) {
        killAll(SIGKILL, false);
        killedLocal_ = true;
      }
      if (!killedRemote_ && now >= stopAt_ + seconds(options_.graceSeconds) + kRemoteExtraGrace) {
        killAll(SIGKILL, true);
        killedRemote_ = true;
      }
    }

    std::vector<pollfd> fds;
    std::vector<std::pair<int, int>> owners;  // rank, stream
    fds.push_back({signalFd_, POLLIN, 0});
    owners.emplace_back(-1, -1);
    for (size_t i = 0; i < ranks_.size(); ++i) {
      for (int k = 0; k < 2; ++k) {
        if (ranks_[i].fds[k] >= 0) {
          fds.push_back({ranks_[i].fds[k], POLLIN, 0});
          owners.emplace_back(static_cast<int>(i), k);
        }
      }
    }
    int timeoutMs = 250;
    if (stop_ != Stop::kNone && !killedRemote_) {
      auto next = stopAt_ + seconds(options_.graceSeconds) + (killedLocal_ ? kRemoteExtraGrace : Clock::duration{});
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
      timeoutMs = static_cast<int>(std::clamp<long long>(ms, 0, timeoutMs));
    }
    if (poll(fds.data(), fds.size(), timeoutMs) < 0 && errno != EINTR) {
      throw std::system_error(errno, std::generic_category(), "poll");
    }
    for (size_t f = 1; f < fds.size(); ++f) {
      if (fds[f].revents != 0) readFrom(ranks_[owners[f].first], owners[f].second);
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info{};
      while (read(signalFd_, &info, sizeof(info)) == sizeof(info)) {
        int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGCHLD) continue;  // reaped at the top of the loop
        if (stop_ == Stop::kNone) {
          stopSignal_ = sig;
          beginStop(Stop::kSignal, -1, Clock::now());
        } else {
          killAll(SIGKILL, true);  // asked twice: no more grace
          killedLocal_ = killedRemote_ = true;
        }
      }
    }
  }
}

void Job::readFrom(Rank& rank, int stream, int maxReads) {
  char buf[65536];
  for (int reads = 0; reads < maxReads && rank.fds[stream] >= 0; ++reads) {
    ssize_t n = read(rank.fds[stream], buf, sizeof(buf));
    if (n > 0) {
      rank.out[stream]->feed(std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && (errno == EINTR)) continue;
    if (n < 0 && errno == EAGAIN) return;
    rank.out[stream]->finish();  // EOF or error: the stream is over
    closeFd(rank.fds[stream]);
    return;
  }
}

void Job::reap() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (auto& r : ranks_) {
      if (r.pid == pid && r.running) {
        r.running = false;
        r.status = status;
        onExit(r);
      }
    }
  }
}

void Job::onExit(Rank& rank) {
  if (rank.remote) closeFd(rank.stdinFd);
  if (stop_ != Stop::kNone) return;
  auto now = Clock::now();
  if (rank.remote && !rank.started) {
    // Read what the remote shell said before judging (ssh's error line).
    for (int k = 0; k < 2; ++k) readFrom(rank, k, 1 << 20);
    if (!rank.started) {
      beginStop(Stop::kStartFailed, rank.placement.rank, now);
      return;
    }
  }
  if (!WIFEXITED(rank.status) || WEXITSTATUS(rank.status) != 0) {
    beginStop(Stop::kRankFailed, rank.placement.rank, now);
  }
}

void Job::checkArrivals(Clock::time_point now) {
  if (!arrivalsPending_ || !arrivals_ || options_.startTimeoutSeconds <= 0 ||
      stop_ != Stop::kNone) {
    return;
  }
  bool pastDeadline = now >= startedAt_ + seconds(options_.startTimeoutSeconds);
  if (!pastDeadline && now - lastArrivalPoll_ < kArrivalPoll) return;
  lastArrivalPoll_ = now;
  std::vector<int> missing;
  for (auto& r : ranks_) {
    if (r.arrived || !r.running) continue;
    try {
      r.arrived = arrivals_->check("kolo/arrived/" + std::to_string(r.placement.rank));
    } catch (const std::exception&) {
      // The store is in this process; a failure here means it is shutting down.
    }
    if (!r.arrived) missing.push_back(r.placement.rank);
  }
  if (pastDeadline && !missing.empty()) {
    missing_ = missing;
    beginStop(Stop::kStartTimeout, -1, now);
  }
  if (pastDeadline || missing.empty()) arrivalsPending_ = false;  // settled
}

void Job::beginStop(Stop reason, int rank, Clock::time_point now) {
  if (stop_ != Stop::kNone) return;
  stop_ = reason;
  stopRank_ = rank;
  stopAt_ = now;
  if (reason == Stop::kRankFailed && arrivals_) {
    // A rank that fails at start-up most likely waited for one that never
    // came: the report names those too (before the others are stopped),
    // where some rank did arrive (a program that never rendezvouses is
    // not waiting for anyone).
    std::vector<int> notYet;
    bool someArrived = false;
    for (auto& r : ranks_) {
      if (!r.arrived) {
        try {
          r.arrived = arrivals_->check("kolo/arrived/" + std::to_string(r.placement.rank));
        } catch (const std::exception&) {
          r.arrived = true;  // the store is shutting down: claim nothing
        }
      }
      someArrived = someArrived || r.arrived;
      if (!r.arrived && r.placement.rank != rank) notYet.push_back(r.placement.rank);
    }
    if (someArrived) missing_ = std::move(notYet);
  }
  for (auto& r : ranks_) {
    if (!r.running) continue;
    ++stoppedOthers_;
    if (r.remote) {
      closeFd(r.stdinFd);  // its watchdog stops the program (TERM, grace, KILL)
    } else {
      kill(-r.pid, SIGTERM);
    }
  }
}

void Job::killAll(int signal, bool includeRemote) {
  for (auto& r : ranks_) {
    if (r.pid <= 0 || (r.remote && !includeRemote)) continue;
    kill(-r.pid, signal);
  }
}

}  // namespace kolo::launcher
