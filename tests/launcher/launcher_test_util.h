// Running kolorun from tests: with a deadline, capturing both streams, and
// scanning /proc for processes left behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kolo::launcher::testing {

// Paths compiled in by tests/launcher/CMakeLists.txt.
const char* kolorunPath();
const char* probePath();
const char* sourceDir();  // repository root

struct RunResult {
  int exitCode = -1;  // 128+N when killed by signal N
  std::string out;
  std::string err;
  double seconds = 0;
  bool timedOut = false;
};

// A kolorun (or any program) running in the background with both streams
// captured. The destructor SIGKILLs it if it is still running.
class Running {
 public:
  explicit Running(const std::vector<std::string>& argv,
                   const std::vector<std::string>& extraEnv = {});
  ~Running();
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;

  pid_t pid() const { return pid_; }
  // Reads output until stdout contains `text`; false on timeout or exit.
  bool waitForOutput(const std::string& text, std::chrono::milliseconds timeout);
  // Reads output until done(stdout) holds; false on timeout or once both
  // streams closed without it. Keeps the pipes drained meanwhile.
  bool waitUntil(const std::function<bool(const std::string&)>& done,
                 std::chrono::milliseconds timeout);
  void signal(int sig);
  // Waits for exit (SIGKILL after timeout, then timedOut is set).
  RunResult wait(std::chrono::milliseconds timeout);
  const std::string& out() const { return result_.out; }
  const std::string& err() const { return result_.err; }

 private:
  bool pump(int timeoutMs);  // false once both streams are closed

  pid_t pid_ = -1;
  int outFd_ = -1;
  int errFd_ = -1;
  std::chrono::steady_clock::time_point start_;
  RunResult result_;
  bool reaped_ = false;
};

// kolorun ARGS..., bounded by timeout.
RunResult runKolorun(const std::vector<std::string>& args,
                     std::chrono::milliseconds timeout = std::chrono::seconds(60),
                     const std::vector<std::string>& extraEnv = {});

// Pids of live (non-zombie) processes whose command line contains text.
std::vector<pid_t> processesWith(const std::string& text);

// Waits up to timeout for processesWith(text) to become empty; returns what
// is left.
std::vector<pid_t> waitForNoProcessesWith(const std::string& text,
                                          std::chrono::milliseconds timeout);

// Lines of text.
std::vector<std::string> splitLines(const std::string& text);

// A token unique to this test run, to tag processes.
std::string uniqueToken(const std::string& name);

// rank -> (NAME -> VALUE) from the probe's "[R]<stdout>:NAME=VALUE" lines.
std::map<int, std::map<std::string, std::string>> envByRank(const std::string& out);

// The last line of text ("" when empty).
std::string lastLine(const std::string& text);

}  // namespace kolo::launcher::testing
