#include "worker_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "remote.h"

namespace kolo::launcher {
namespace {

void closeFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

std::string signalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace

std::string describeExit(int status, bool remote) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "was killed by " + signalName(sig) + " (" + strsignal(sig) + ")";
  }
  int code = WEXITSTATUS(status);
  std::string text = "exited with code " + std::to_string(code);
  if (remote && code > 128 && code < 128 + NSIG) {
    text += " (" + signalName(code - 128) + " on the remote host?)";
  }
  return text;
}

WorkerProcess::WorkerProcess(int label, const RankCommand& command, bool remote, int fileFds[2],
                             bool timestamp)
    : label_(label), remote_(remote) {
  Spawned s;
  try {
    s = spawnProcess(command.spawn);
  } catch (...) {
    closeFd(fileFds[0]);
    closeFd(fileFds[1]);
    throw;
  }
  pid_ = s.pid;
  fds_[0] = s.stdoutFd;
  fds_[1] = s.stderrFd;
  stdinFd_ = s.stdinFd;
  running_ = true;
  started_ = !remote;
  for (int k = 0; k < 2; ++k) {
    out_[k] = std::make_unique<OutputForwarder>(
        label_, k == 0 ? StreamKind::kStdout : StreamKind::kStderr,
        k == 0 ? STDOUT_FILENO : STDERR_FILENO, fileFds[k], timestamp);
    fileFds[k] = -1;
  }
  if (remote_) {
    out_[0]->interceptMarker(kRemoteStartedMarker, [this] { started_ = true; });
    // A few KiB, far below a pipe's capacity: completes at once. It fails
    // only when the remote shell is already gone; reaping reports that.
    if (!writeAll(stdinFd_, command.stdinScript)) closeFd(stdinFd_);
  }
}

WorkerProcess::~WorkerProcess() {
  closeFd(stdinFd_);
  closeFd(fds_[0]);
  closeFd(fds_[1]);
}

void WorkerProcess::pollFds(std::vector<pollfd>& fds) const {
  for (int fd : fds_) {
    if (fd >= 0) fds.push_back({fd, POLLIN, 0});
  }
}

void WorkerProcess::readFrom(int fd, int maxReads) {
  int stream = fd == fds_[0] ? 0 : fd == fds_[1] ? 1 : -1;
  if (stream < 0) return;
  char buf[65536];
  for (int reads = 0; reads < maxReads && fds_[stream] >= 0; ++reads) {
    ssize_t n = read(fds_[stream], buf, sizeof(buf));
    if (n > 0) {
      out_[stream]->feed(std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    out_[stream]->finish();
    closeFd(fds_[stream]);
    return;
  }
}

void WorkerProcess::exited(int status) {
  running_ = false;
  status_ = status;
  closeFd(stdinFd_);
  if (remote_ && !started_) {
    for (int k = 0; k < 2; ++k) {
      if (fds_[k] >= 0) readFrom(fds_[k], 1 << 20);
    }
  }
}

void WorkerProcess::stop() {
  if (!running_) return;
  if (remote_) {
    closeFd(stdinFd_);  // its watchdog stops the program (TERM, grace, KILL)
  } else {
    ::kill(-pid_, SIGTERM);
  }
}

void WorkerProcess::kill(int signal) {
  if (pid_ > 0) ::kill(-pid_, signal);
}

void WorkerProcess::flush() {
  for (auto& o : out_) {
    if (o) o->finish();
  }
}

std::string WorkerProcess::lastErrorLine() const { return out_[1] ? out_[1]->lastLine() : ""; }

}  // namespace kolo::launcher
