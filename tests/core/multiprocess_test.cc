// Real processes over the authenticated TCP store: the test hosts the store
// (as kolorun would) and starts the workers with the launcher environment.
#include <gtest/gtest.h>

#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness/ports.h"
#include "kolo/tcp_store.h"

namespace {

struct Worker {
  pid_t pid = -1;
  int out = -1;
  std::string output;
  int status = -1;
};

enum class Launcher { kKolo, kTorchrun };

Worker startWorker(int rank, int size, uint16_t port, const std::string& scenario,
                   const std::string& timeoutSeconds, Launcher launcher = Launcher::kKolo) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  Worker w;
  w.pid = fork();
  if (w.pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    if (launcher == Launcher::kKolo) {
      setenv("KOLO_RANK", std::to_string(rank).c_str(), 1);
      setenv("KOLO_SIZE", std::to_string(size).c_str(), 1);
      setenv("KOLO_LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("KOLO_LOCAL_SIZE", std::to_string(size).c_str(), 1);
      setenv("KOLO_RENDEZVOUS_ADDR", "127.0.0.1", 1);
      setenv("KOLO_RENDEZVOUS_PORT", std::to_string(port).c_str(), 1);
      setenv("KOLO_SECRET_KEY", "multiprocess-test-secret", 1);
    } else {  // what torchrun sets; rank 0 hosts kolo's store on MASTER_PORT+1
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(size).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port - 1).c_str(), 1);
    }
    setenv("KOLO_TIMEOUT", timeoutSeconds.c_str(), 1);
    setenv("KOLO_LOG_LEVEL", "off", 1);
    execl(KOLO_MP_WORKER, KOLO_MP_WORKER, scenario.c_str(), nullptr);
    _exit(127);
  }
  close(fds[1]);
  w.out = fds[0];
  return w;
}

// Reads output until the worker exits or the deadline passes (then kills it).
void finish(Worker& w, std::chrono::steady_clock::time_point deadline) {
  char buf[4096];
  while (true) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) {
      kill(w.pid, SIGKILL);
      break;
    }
    pollfd p{w.out, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) continue;
    ssize_t n = read(w.out, buf, sizeof buf);
    if (n <= 0) break;
    w.output.append(buf, static_cast<size_t>(n));
  }
  close(w.out);
  waitpid(w.pid, &w.status, 0);
}

// Starts `size` workers of scenario and reads each until it exits (60 s
// at most for all of them).
std::vector<Worker> runWorkers(uint16_t port, int size, const std::string& scenario,
                               const std::string& timeoutSeconds,
                               Launcher launcher = Launcher::kKolo) {
  std::vector<Worker> workers;
  for (int r = 0; r < size; ++r) {
    workers.push_back(startWorker(r, size, port, scenario, timeoutSeconds, launcher));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (auto& w : workers) finish(w, deadline);
  return workers;
}

TEST(MultiProcess, TwoProcessesAllreduceOverTheTcpStore) {
  kolo::TcpStoreServer server("127.0.0.1", 0, "multiprocess-test-secret");
  for (const auto& w : runWorkers(server.port(), 2, "sum", "20")) {
    EXPECT_TRUE(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0) << w.output;
    EXPECT_NE(w.output.find("OK"), std::string::npos) << w.output;
  }
}

TEST(MultiProcess, TorchrunEnvironmentRankZeroHostsTheStore) {
  const uint16_t port = kolo::test::freeListenPort(true);  // MASTER_PORT is port - 1
  for (const auto& w : runWorkers(port, 2, "sum", "20", Launcher::kTorchrun)) {
    EXPECT_TRUE(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0) << w.output;
    EXPECT_NE(w.output.find("OK"), std::string::npos) << w.output;
  }
}

TEST(MultiProcess, KilledPeerIsNamedWithinTheTimeout) {
  kolo::TcpStoreServer server("127.0.0.1", 0, "multiprocess-test-secret");
  Worker r0 = startWorker(0, 2, server.port(), "die", "5");
  Worker r1 = startWorker(1, 2, server.port(), "die", "5");
  auto start = std::chrono::steady_clock::now();
  finish(r0, start + std::chrono::seconds(30));
  auto took = std::chrono::steady_clock::now() - start;
  finish(r1, start + std::chrono::seconds(30));
  EXPECT_TRUE(WIFEXITED(r0.status) && WEXITSTATUS(r0.status) == 3) << r0.output;
  EXPECT_NE(r0.output.find("rank 1"), std::string::npos) << r0.output;
  EXPECT_LT(took, std::chrono::seconds(12));
}

// Over TCP a rank hears of a failure only from the peers it talks to
// (recursive doubling, rings), in the connections where it waits. Every
// survivor names the dead rank alone, not also survivors still on their way
// to saying they are alive: "die" has every rank in the same collectives;
// in "kill-in-set" rank 0 fails in a process set's connections while rank 2
// waits for it in set 0's negotiation, and learns of the failure only when
// rank 0 closes those too.
void expectOnlyTheDeadRankNamed(const std::string& scenario, int size) {
  kolo::TcpStoreServer server("127.0.0.1", 0, "multiprocess-test-secret");
  setenv("KOLO_SHM", "0", 1);  // the workers inherit it: every rank on TCP
  const std::vector<Worker> workers = runWorkers(server.port(), size, scenario, "5");
  unsetenv("KOLO_SHM");
  for (int r = 0; r < size; ++r) {
    if (r == 1) continue;  // the rank that died
    const std::string& out = workers[r].output;
    EXPECT_TRUE(WIFEXITED(workers[r].status) && WEXITSTATUS(workers[r].status) == 3)
        << "rank " << r << ": " << out;
    EXPECT_NE(out.find("rank 1 stopped responding"), std::string::npos) << "rank " << r << ": " << out;
    EXPECT_EQ(out.find("ranks "), std::string::npos) << "rank " << r << ": " << out;
  }
}

TEST(MultiProcess, KilledPeerIsTheOnlyRankNamedByEverySurvivorOfEight) {
  expectOnlyTheDeadRankNamed("die", 8);
}

TEST(MultiProcess, PeerKilledInAProcessSetIsTheOnlyRankNamedByEverySurvivor) {
  expectOnlyTheDeadRankNamed("kill-in-set", 4);
}

TEST(MultiProcess, StoppedPeerIsNamedWithinTheTimeout) {
  kolo::TcpStoreServer server("127.0.0.1", 0, "multiprocess-test-secret");
  Worker r0 = startWorker(0, 2, server.port(), "stop", "3");
  Worker r1 = startWorker(1, 2, server.port(), "stop", "3");
  auto start = std::chrono::steady_clock::now();
  finish(r0, start + std::chrono::seconds(30));
  auto took = std::chrono::steady_clock::now() - start;
  kill(r1.pid, SIGKILL);
  finish(r1, start + std::chrono::seconds(30));
  EXPECT_TRUE(WIFEXITED(r0.status) && WEXITSTATUS(r0.status) == 3) << r0.output;
  EXPECT_NE(r0.output.find("rank 1 stopped responding"), std::string::npos) << r0.output;
  EXPECT_LT(took, std::chrono::seconds(12));
}

// A C++ program that returns from main() without kolo::shutdown() leaves
// the job at exit (the atexit hook), cleanly and at once.
TEST(MultiProcess, ReturningFromMainWithoutShutdownExitsCleanly) {
  kolo::TcpStoreServer server("127.0.0.1", 0, "multiprocess-test-secret");
  for (const auto& w : runWorkers(server.port(), 2, "exit-without-shutdown", "20")) {
    EXPECT_TRUE(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0) << w.output;
    EXPECT_NE(w.output.find("OK"), std::string::npos) << w.output;
  }
}

// When the engine cannot stop (a completion callback never returns), exit
// still ends within KOLO_TIMEOUT, with exit code 1 and the reason.
TEST(MultiProcess, ExitIsBoundedByTheTimeoutWhenShutdownHangs) {
  kolo::TcpStoreServer server("127.0.0.1", 0, "multiprocess-test-secret");
  const auto start = std::chrono::steady_clock::now();
  // Unbounded, the callbacks would hold the processes for an hour.
  for (const auto& w : runWorkers(server.port(), 2, "exit-hung-callback", "2")) {
    EXPECT_TRUE(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 1) << w.output;
    EXPECT_NE(w.output.find("RETURNING"), std::string::npos) << w.output;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(50));
}

TEST(MultiProcess, EveryOpOnSharedMemory) {
  kolo::TcpStoreServer server("127.0.0.1", 0, "multiprocess-test-secret");
  for (const auto& w : runWorkers(server.port(), 3, "every-op", "20")) {
    EXPECT_TRUE(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0) << w.output;
    EXPECT_NE(w.output.find("EVERY-OP"), std::string::npos) << w.output;
  }
}

// Three ranks of one host on shared memory (the default), 64 MB allreduces
// back to back, rank 1 killed or stopped 300 ms in (most likely inside a
// collective): the others fail naming it, detected by the shared-memory
// control or data plane, within the timeout.
void expectMidCollectiveFaultNamed(const std::string& scenario, const std::string& expected) {
  kolo::TcpStoreServer server("127.0.0.1", 0, "multiprocess-test-secret");
  std::vector<Worker> workers;
  for (int r = 0; r < 3; ++r) workers.push_back(startWorker(r, 3, server.port(), scenario, "3"));
  auto start = std::chrono::steady_clock::now();
  for (int r : {0, 2}) finish(workers[r], start + std::chrono::seconds(30));
  auto took = std::chrono::steady_clock::now() - start;
  kill(workers[1].pid, SIGKILL);
  finish(workers[1], start + std::chrono::seconds(30));
  for (int r : {0, 2}) {
    const Worker& w = workers[r];
    EXPECT_TRUE(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 3) << w.output;
    EXPECT_NE(w.output.find("rank 1"), std::string::npos) << w.output;
    EXPECT_NE(w.output.find(": shm "), std::string::npos) << w.output;
    EXPECT_NE(w.output.find(expected), std::string::npos) << w.output;
  }
  // 300 ms to the fault, the 3 s timeout (stop), up to 5 s naming the rank.
  EXPECT_LT(took, std::chrono::seconds(12));
  // The job's segments (names from its store) are gone from /dev/shm:
  // removed once every rank had mapped them, before the fault.
  auto store = server.localStore();
  for (const char* key : {"kolo/1/control/shm-control/shm/segment",
                          "kolo/1/data/shm-data/shm/segment"}) {
    auto value = store->get(key, std::chrono::seconds(1));
    const std::string name(value.begin(), value.end());
    EXPECT_EQ(name.rfind("/kolo-", 0), 0u) << key << ": " << name;
    EXPECT_NE(access(("/dev/shm" + name).c_str(), F_OK), 0) << name << " left in /dev/shm";
  }
  std::printf("[detect] shm %s: survivors exited %.1f s after start; rank 0: %s",
              scenario.c_str(), std::chrono::duration<double>(took).count(),
              workers[0].output.c_str());
}

TEST(MultiProcess, KilledPeerMidCollectiveOnSharedMemory) {
  expectMidCollectiveFaultNamed("kill-mid", "rank 1 exited (process ");
}

TEST(MultiProcess, StoppedPeerMidCollectiveOnSharedMemory) {
  expectMidCollectiveFaultNamed("stop-mid", "rank 1 made no progress for 3000 ms (its process ");
}

}  // namespace
