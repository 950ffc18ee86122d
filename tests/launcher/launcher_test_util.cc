#include "launcher_test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <regex>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <sstream>
#include <thread>

extern char** environ;

namespace kolo::launcher::testing {

const char* kolorunPath() { return KOLO_TEST_KOLORUN; }
const char* probePath() { return KOLO_TEST_PROBE; }
const char* sourceDir() { return KOLO_TEST_SOURCE_DIR; }

Running::Running(const std::vector<std::string>& argv, const std::vector<std::string>& extraEnv) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& e : extraEnv) env.push_back(e);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) std::abort();
  start_ = std::chrono::steady_clock::now();
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  outFd_ = out[0];
  errFd_ = err[0];
}

Running::~Running() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (outFd_ >= 0) close(outFd_);
  if (errFd_ >= 0) close(errFd_);
}

bool Running::pump(int timeoutMs) {
  pollfd fds[2] = {{outFd_, POLLIN, 0}, {errFd_, POLLIN, 0}};
  if (outFd_ < 0 && errFd_ < 0) return false;
  if (poll(fds, 2, timeoutMs) <= 0) return true;
  int* owners[2] = {&outFd_, &errFd_};
  std::string* sinks[2] = {&result_.out, &result_.err};
  for (int i = 0; i < 2; ++i) {
    if (*owners[i] < 0 || fds[i].revents == 0) continue;
    char buf[65536];
    ssize_t n = read(*owners[i], buf, sizeof(buf));
    if (n > 0) {
      sinks[i]->append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      close(*owners[i]);
      *owners[i] = -1;
    }
  }
  return true;
}

bool Running::waitForOutput(const std::string& text, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (result_.out.find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (!pump(50)) return result_.out.find(text) != std::string::npos;
  }
  return true;
}

bool Running::waitUntil(const std::function<bool(const std::string&)>& done,
                        std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done(result_.out)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (!pump(50)) return done(result_.out);
  }
  return true;
}

void Running::signal(int sig) { kill(pid_, sig); }

RunResult Running::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (!reaped_) {
    pump(20);
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      result_.timedOut = true;
      kill(pid_, SIGKILL);
    }
  }
  result_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // Output still buffered in the pipes (bounded: writers may outlive kolorun
  // only if something is wrong, which the tests then report).
  auto drainUntil = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while ((outFd_ >= 0 || errFd_ >= 0) && std::chrono::steady_clock::now() < drainUntil) pump(50);
  result_.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result_;
}

RunResult runKolorun(const std::vector<std::string>& args, std::chrono::milliseconds timeout,
                     const std::vector<std::string>& extraEnv) {
  std::vector<std::string> argv = {kolorunPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  Running run(argv, extraEnv);
  return run.wait(timeout);
}

namespace {

// Whole file, or "" when it cannot be read (the process may just have gone).
std::string readProcFile(const std::string& path) {
  std::string data;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return data;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) data.append(buf, static_cast<size_t>(n));
  close(fd);
  return data;
}

}  // namespace

std::vector<pid_t> processesWith(const std::string& text) {
  std::vector<pid_t> found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* d = readdir(proc)) {
    pid_t pid = std::atoi(d->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    std::string base = std::string("/proc/") + d->d_name;
    if (readProcFile(base + "/cmdline").find(text) == std::string::npos) continue;
    std::string stat = readProcFile(base + "/stat");
    size_t paren = stat.rfind(')');
    char state = paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 'X';
    if (state != 'Z' && state != 'X') found.push_back(pid);
  }
  closedir(proc);
  return found;
}

std::vector<pid_t> waitForNoProcessesWith(const std::string& text,
                                          std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = processesWith(text);
    if (left.empty() || std::chrono::steady_clock::now() >= deadline) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string uniqueToken(const std::string& name) {
  static std::atomic<int> counter{0};
  return "kolotok-" + name + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

std::map<int, std::map<std::string, std::string>> envByRank(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> env;
  std::regex line(R"(^\[(\d+)\]<stdout>:([A-Z_]+)=(.*)$)");
  for (const auto& l : splitLines(out)) {
    std::smatch m;
    if (std::regex_match(l, m, line)) env[std::stoi(m[1])][m[2]] = m[3];
  }
  return env;
}

std::string lastLine(const std::string& text) {
  auto lines = splitLines(text);
  return lines.empty() ? "" : lines.back();
}

}  // namespace kolo::launcher::testing
