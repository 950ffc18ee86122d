// One worker process of an elastic job (or its remote shell): started from a
// RankCommand, its output forwarded with a "[label]" prefix, stopped and
// killed by process group. Single-threaded: the driver loop owns it.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "output.h"
#include "plan.h"

namespace kolo::launcher {

class WorkerProcess {
 public:
  // Starts the process; throws std::system_error / UsageError when it cannot.
  // fileFds: the stdout/stderr files of --output-filename (or -1), owned from
  // now on.
  WorkerProcess(int label, const RankCommand& command, bool remote, int fileFds[2],
                bool timestamp);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool remote() const { return remote_; }
  // Local: once spawned; remote: once the remote shell said the program starts.
  bool started() const { return started_; }
  bool running() const { return running_; }
  int status() const { return status_; }  // wait status, once exited

  // Adds the open output pipes to fds (owner index in owners).
  void pollFds(std::vector<pollfd>& fds) const;
  bool owns(int fd) const { return fd == fds_[0] || fd == fds_[1]; }
  // Forwards what a pipe holds now (fd from pollFds); at most maxReads reads.
  void readFrom(int fd, int maxReads = 4);
  bool outputOpen() const { return fds_[0] >= 0 || fds_[1] >= 0; }

  // The process was reaped with this wait status. A remote worker's output
  // is read to the end first (its shell's last words).
  void exited(int status);
  // Asks it to stop: SIGTERM to its group, or for a remote worker closing
  // the remote shell's stdin (its watchdog stops the program).
  void stop();
  void kill(int signal);  // to the process group
  void flush();           // ends partial output lines
  // The last line it wrote on stderr (for messages about failed starts).
  std::string lastErrorLine() const;

 private:
  int label_;
  bool remote_;
  pid_t pid_ = -1;
  int stdinFd_ = -1;
  int fds_[2] = {-1, -1};
  std::unique_ptr<OutputForwarder> out_[2];
  bool started_ = false;
  bool running_ = false;
  int status_ = 0;
};

// "was killed by SIGKILL (Killed)" / "exited with code 3".
std::string describeExit(int status, bool remote);

}  // namespace kolo::launcher
