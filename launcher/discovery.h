// Running --host-discovery-script (a shell command, run on this machine) as a
// child of the elastic driver's loop without blocking the loop. Single
// threaded: the loop owns it and reaps its process.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "hosts.h"

namespace kolo::launcher {

class DiscoveryScript {
 public:
  using Clock = std::chrono::steady_clock;

  DiscoveryScript(std::string command, int defaultSlots, std::chrono::milliseconds timeout,
                  std::vector<std::string> env);
  ~DiscoveryScript();
  DiscoveryScript(const DiscoveryScript&) = delete;
  DiscoveryScript& operator=(const DiscoveryScript&) = delete;

  struct Result {
    bool ok = false;
    std::vector<HostSlots> hosts;
    std::string error;  // when !ok: what went wrong, with what the script said
  };

  // Runs it to the end now (blocking, bounded by the timeout); the driver's
  // first discovery, which must succeed.
  Result runNow();

  // Starts a run in the background (no-op while one runs).
  void start(Clock::time_point now);
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  void pollFds(std::vector<pollfd>& fds) const;
  bool owns(int fd) const { return fd == out_ || fd == err_; }
  void readFrom(int fd);
  // Kills a run that is over its timeout (reaped as usual afterwards).
  void enforceTimeout(Clock::time_point now);
  // Its process was reaped with this wait status: the outcome.
  Result exited(int status);

  const std::string& command() const { return command_; }

 private:
  void closeFds();

  std::string command_;
  int defaultSlots_;
  std::chrono::milliseconds timeout_;
  std::vector<std::string> env_;
  pid_t pid_ = -1;
  int out_ = -1;
  int err_ = -1;
  std::string stdout_, stderr_;
  Clock::time_point startedAt_{};
  bool timedOut_ = false;
};

}  // namespace kolo::launcher
