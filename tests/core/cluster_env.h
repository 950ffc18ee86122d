// Helpers for tests that start kolo processes with a cluster engine's
// environment (Kubernetes operators, mpirun with a hostfile): a child that
// gets exactly the variables the test names (plus PATH and LD_LIBRARY_PATH,
// nothing inherited from the test's own launcher), its output collected
// until a deadline, and the line cluster_worker prints parsed.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace kolo::testing {

struct Child {
  pid_t pid = -1;
  int out = -1;
  std::string output;  // stdout and stderr together
  int status = -1;
  bool exitedZero() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

// Starts argv with env as its whole environment (PATH and LD_LIBRARY_PATH
// are taken from the test when env does not name them).
inline Child startChild(const std::vector<std::string>& argv,
                        std::map<std::string, std::string> env) {
  for (const char* keep : {"PATH", "LD_LIBRARY_PATH"}) {
    const char* v = std::getenv(keep);
    if (v != nullptr && env.count(keep) == 0) env[keep] = v;
  }
  std::vector<std::string> envText;
  for (const auto& [k, v] : env) envText.push_back(k + "=" + v);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {};
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    std::vector<char*> args, envp;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    for (const auto& e : envText) envp.push_back(const_cast<char*>(e.c_str()));
    args.push_back(nullptr);
    envp.push_back(nullptr);
    // Its own process group, so a timed-out child is killed with what it started.
    setpgid(0, 0);
    execvpe(args[0], args.data(), envp.data());
    std::perror(args[0]);
    _exit(127);
  }
  close(fds[1]);
  c.out = fds[0];
  return c;
}

// Collects output until the child exits; past the deadline, kills its
// process group and reaps it.
inline void finish(Child& c, std::chrono::steady_clock::time_point deadline) {
  char buf[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      kill(-c.pid, SIGKILL);
      kill(c.pid, SIGKILL);
      c.output += "\n[killed at the test's deadline]";
      break;
    }
    pollfd p{c.out, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = read(c.out, buf, sizeof buf);
    if (n <= 0) break;
    c.output.append(buf, static_cast<size_t>(n));
  }
  close(c.out);
  waitpid(c.pid, &c.status, 0);
}

// One "cluster-worker ..." line of cluster_worker's output.
struct WorkerReport {
  int rank = -1, size = -1, localRank = -1, localSize = -1, crossRank = -1, crossSize = -1;
  double sum = -1;
  std::string controller;
};

// Every report in text (mpirun gathers several ranks' lines into one output).
inline std::vector<WorkerReport> reportsIn(const std::string& text) {
  std::vector<WorkerReport> out;
  size_t pos = 0;
  while ((pos = text.find("cluster-worker rank=", pos)) != std::string::npos) {
    WorkerReport r;
    char controller[32] = {};
    if (std::sscanf(text.c_str() + pos,
                    "cluster-worker rank=%d size=%d local=%d/%d cross=%d/%d sum=%lf "
                    "controller=%31s",
                    &r.rank, &r.size, &r.localRank, &r.localSize, &r.crossRank, &r.crossSize,
                    &r.sum, controller) == 8) {
      r.controller = controller;
      out.push_back(r);
    }
    ++pos;
  }
  return out;
}

}  // namespace kolo::testing
