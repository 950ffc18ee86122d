#include "discovery.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <exception>
#include <system_error>

#include "options.h"
#include "process.h"
#include "usage_error.h"
#include "worker_process.h"

namespace kolo::launcher {
namespace {

constexpr size_t kMaxOutput = 1 << 20;

void closeFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

std::string lastLineOf(const std::string& text) {
  size_t end = text.find_last_not_of("\n");
  if (end == std::string::npos) return "";
  size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

}  // namespace

DiscoveryScript::DiscoveryScript(std::string command, int defaultSlots,
                                 std::chrono::milliseconds timeout, std::vector<std::string> env)
    : command_(std::move(command)),
      defaultSlots_(defaultSlots),
      timeout_(timeout),
      env_(std::move(env)) {}

DiscoveryScript::~DiscoveryScript() {
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  closeFds();
}

void DiscoveryScript::closeFds() {
  closeFd(out_);
  closeFd(err_);
}

void DiscoveryScript::start(Clock::time_point now) {
  if (pid_ > 0) return;
  SpawnSpec spec;
  spec.path = "/bin/sh";
  spec.argv = {"sh", "-c", command_};
  spec.env = env_;
  Spawned s = spawnProcess(spec);
  pid_ = s.pid;
  out_ = s.stdoutFd;
  err_ = s.stderrFd;
  stdout_.clear();
  stderr_.clear();
  startedAt_ = now;
  timedOut_ = false;
}

void DiscoveryScript::pollFds(std::vector<pollfd>& fds) const {
  for (int fd : {out_, err_}) {
    if (fd >= 0) fds.push_back({fd, POLLIN, 0});
  }
}

void DiscoveryScript::readFrom(int fd) {
  int& owned = fd == out_ ? out_ : err_;
  std::string& into = fd == out_ ? stdout_ : stderr_;
  char buf[8192];
  for (;;) {
    ssize_t n = read(owned, buf, sizeof(buf));
    if (n > 0) {
      if (into.size() < kMaxOutput) into.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    closeFd(owned);
    return;
  }
}

void DiscoveryScript::enforceTimeout(Clock::time_point now) {
  if (pid_ > 0 && !timedOut_ && now - startedAt_ > timeout_) {
    timedOut_ = true;
    ::kill(-pid_, SIGKILL);
  }
}

DiscoveryScript::Result DiscoveryScript::exited(int status) {
  for (int fd : {out_, err_}) {
    if (fd >= 0) readFrom(fd);  // what is left in the pipes
  }
  closeFds();
  pid_ = -1;
  Result r;
  std::string said = lastLineOf(stderr_);
  if (timedOut_) {
    r.error = "--host-discovery-script '" + command_ + "' did not finish within " +
              formatNumber(std::chrono::duration<double>(timeout_).count()) + " s";
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    r.error = "--host-discovery-script '" + command_ + "' " + describeExit(status, false) +
              (said.empty() ? "" : ": " + said);
  } else {
    try {
      r.hosts = parseDiscoveryOutput(stdout_, defaultSlots_, command_);
      r.ok = true;
    } catch (const UsageError& e) {
      r.error = e.what();
    }
  }
  return r;
}

DiscoveryScript::Result DiscoveryScript::runNow() {
  try {
    start(Clock::now());
  } catch (const std::exception& e) {
    return {false, {}, "--host-discovery-script '" + command_ + "': cannot run /bin/sh: " +
                           e.what()};
  }
  for (;;) {
    std::vector<pollfd> fds;
    pollFds(fds);
    if (fds.empty()) break;
    if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) {
      throw std::system_error(errno, std::generic_category(), "poll");
    }
    for (const auto& p : fds) {
      if (p.revents != 0) readFrom(p.fd);
    }
    enforceTimeout(Clock::now());
  }
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  return exited(status);
}

}  // namespace kolo::launcher
