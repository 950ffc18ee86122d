#include "process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <sstream>
#include <system_error>

namespace kolo::launcher {
namespace {

constexpr int kJobSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD};

void makePipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
}

void closeFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// Between vfork and exec only system calls: the child shares kolorun's
// memory (and runs on its stack) until execve, so it allocates nothing,
// writes no variable the parent reads, and ends in execve or _exit.
// Failures report errno through the close-on-exec errPipe.
[[noreturn]] void execChild(const SpawnSpec& spec, char* const* argv, char* const* envp,
                            int in, int out, int err, int errPipe, pid_t parent) {
  auto fail = [&](int code) {
    ssize_t ignored = write(errPipe, &code, sizeof(code));
    (void)ignored;
    _exit(127);
  };
  sigset_t none;
  sigemptyset(&none);
  for (int sig : kJobSignals) signal(sig, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (setpgid(0, 0) != 0) fail(errno);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
  if (getppid() != parent) _exit(137);  // kolorun already died
  if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) fail(errno);
  // Only 0-2 and errPipe (close-on-exec) stay open.
  for (int fd = 3; fd < errPipe; ++fd) close(fd);
  if (syscall(SYS_close_range, errPipe + 1, ~0U, 0) != 0) {
    for (int fd = errPipe + 1; fd < 65536; ++fd) close(fd);
  }
  execve(spec.path.c_str(), argv, envp);
  fail(errno);
  _exit(127);
}

}  // namespace

void blockJobSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kJobSignals) sigaddset(&set, sig);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

Spawned spawnProcess(const SpawnSpec& spec) {
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int outPipe[2], errPipe[2], inPipe[2] = {-1, -1}, execErr[2];
  makePipe(outPipe);
  makePipe(errPipe);
  makePipe(execErr);
  if (spec.stdinPipe) {
    makePipe(inPipe);
  } else {
    inPipe[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  pid_t parent = getpid();
  // vfork, not fork: copying kolorun's address space (its store server runs
  // a thread per connected rank) for every rank made starting N ranks
  // O(N^2), and the copy was thrown away at exec. The parent resumes once
  // the child has exec'd or exited.
  pid_t pid = vfork();
  if (pid == 0) {
    execChild(spec, argv.data(), envp.data(), inPipe[0], outPipe[1], errPipe[1], execErr[1],
              parent);
  }
  int forkErrno = errno;
  closeFd(outPipe[1]);
  closeFd(errPipe[1]);
  closeFd(execErr[1]);
  closeFd(inPipe[0]);
  auto cleanup = [&] {
    closeFd(outPipe[0]);
    closeFd(errPipe[0]);
    closeFd(inPipe[1]);
    closeFd(execErr[0]);
  };
  if (pid < 0) {
    cleanup();
    throw std::system_error(forkErrno, std::generic_category(), "vfork");
  }
  // Also set the group from here so it exists before we ever signal it.
  setpgid(pid, pid);

  int childErrno = 0;
  ssize_t n;
  do {
    n = read(execErr[0], &childErrno, sizeof(childErrno));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(childErrno))) {
    int status = 0;
    waitpid(pid, &status, 0);
    cleanup();
    throw std::system_error(childErrno, std::generic_category(), "exec " + spec.path);
  }
  closeFd(execErr[0]);
  for (int fd : {outPipe[0], errPipe[0], inPipe[1]}) {
    if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return Spawned{pid, outPipe[0], errPipe[0], inPipe[1]};
}

std::optional<std::string> findProgram(const std::string& program, const std::string& pathVar) {
  auto executable = [](const std::string& p) {
    struct stat st {};
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (program.empty()) return std::nullopt;
  if (program.find('/') != std::string::npos) {
    return executable(program) ? std::optional<std::string>(program) : std::nullopt;
  }
  std::stringstream dirs(pathVar);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (executable(candidate)) return candidate;
  }
  return std::nullopt;
}

}  // namespace kolo::launcher
