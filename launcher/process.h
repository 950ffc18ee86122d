// Starting one worker (or remote shell) process with its output on pipes.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace kolo::launcher {

struct SpawnSpec {
  std::string path;               // absolute or relative path, not searched
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // "NAME=VALUE", the whole environment
  bool stdinPipe = false;         // false: stdin is /dev/null
};

// A started process. It leads its own process group (pgid == pid) and gets
// SIGKILL if kolorun dies without stopping it. The fds are non-blocking and
// close-on-exec; the caller owns and closes them.
struct Spawned {
  pid_t pid = -1;
  int stdoutFd = -1;
  int stderrFd = -1;
  int stdinFd = -1;  // write end when stdinPipe, else -1
};

// Throws std::system_error when the process cannot be created or its
// program cannot be executed (errno of the failing step).
Spawned spawnProcess(const SpawnSpec& spec);

// Finds program like execvp would: as given when it contains '/', else in the
// directories of pathVar. Only executable regular files count.
std::optional<std::string> findProgram(const std::string& program, const std::string& pathVar);

// The signals kolorun handles itself (blocked in every thread and read
// through a signalfd); children get them back at their defaults.
void blockJobSignals();

}  // namespace kolo::launcher
