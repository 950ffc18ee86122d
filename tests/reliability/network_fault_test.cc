// Network faults under kolorun: two network-namespace "hosts" on a bridge
// (scripts/netns-hosts.sh, started through scripts/netns-rsh.sh), ranks 0
// and 1 on the first, rank 2 on the second, training fault_worker.cc with
// allreduce-heavy steps and KOLO_TIMEOUT=5, while the test
//   - takes the second host's link down: both survivors fail within the
//     bound naming rank 2, kolorun exits non-zero, nothing is left;
//   - takes it down for 1 s only (shorter than KOLO_TIMEOUT): TCP
//     retransmits, training finishes with identical parameters everywhere;
//   - delays it by 20 ms, drops 5% of its packets (tc netem) or limits it to
//     50 Mbit/s (tc tbf): training finishes with identical parameters.
// Root only; each test skips naming what is missing (root, `ip`, `tc`, the
// kernel's sch_netem). Only the private test subnet 10.77.NET.0/24 inside
// namespaces this test creates is used.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <regex>
#include <set>
#include <thread>

#include "fault_test_util.h"

namespace kolo::reliability {
namespace {

using launcher::testing::kolorunPath;
using launcher::testing::lastLine;
using launcher::testing::Running;
using launcher::testing::RunResult;
using launcher::testing::sourceDir;
using launcher::testing::uniqueToken;
using launcher::testing::waitForNoProcessesWith;
using std::chrono::seconds;

constexpr int kTimeoutSeconds = 5;  // KOLO_TIMEOUT
// Fault -> survivor error: KOLO_TIMEOUT without progress, then up to
// min(KOLO_TIMEOUT, 5 s) asking the store which ranks are alive, + slack.
constexpr int64_t kDetectBoundMs =
    int64_t{kTimeoutSeconds + std::min(kTimeoutSeconds, 5) + 3} * 1000;
constexpr int kWidth = 256;  // about 300 KB of gradients per step
constexpr int kSteps = 60;   // training cases
constexpr auto kSoftLimit = seconds(40);
constexpr auto kHardLimit = seconds(55);

// Prefixes are "kf<pid>h": namespaces kf<pid>h1, kf<pid>h2, bridge
// kf<pid>hbr, veths kf<pid>hv1/2 (at most 15 characters with 7-digit
// pids). The launcher tests use "kl..." and third octets 20-219; these use
// 220-249.
std::string prefixOf(pid_t pid) { return "kf" + std::to_string(pid) + "h"; }

bool run(const std::string& command) { return std::system(command.c_str()) == 0; }

// Output of command (stderr included), "" on failure to start.
std::string capture(const std::string& command) {
  std::string out;
  if (FILE* p = popen((command + " 2>&1").c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}

class NetworkFault : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root (CAP_NET_ADMIN) to create network namespaces; the network "
                      "fault tests did not run";
    }
    if (!run("command -v ip >/dev/null 2>&1")) {
      GTEST_SKIP() << "`ip` (Debian package iproute2) is missing; the network fault tests did "
                      "not run";
    }
    rlimit none{0, 0};
    setrlimit(RLIMIT_CORE, &none);
    script_ = std::string(sourceDir()) + "/scripts/netns-hosts.sh";
    removeLeftovers();
    prefix_ = prefixOf(getpid());
    for (int k = 0; k < 30; ++k) {
      net_ = std::to_string(220 + (getpid() + k) % 30);
      if (!run("ip -o -4 addr show | grep -q ' 10\\.77\\." + net_ + "\\.'")) break;
    }
    if (!run(script_ + " up " + prefix_ + " 2 " + net_ + " >/dev/null 2>&1")) {
      down();
      GTEST_SKIP() << "cannot create network namespaces here (" << script_
                   << " up failed); the network fault tests did not run";
    }
    created_ = true;
    ASSERT_FALSE(scratch_.path().empty()) << "mkdtemp failed";
    marker_ = uniqueToken("netfault");
  }
  void TearDown() override {
    if (!marker_.empty()) killProcessesWith(marker_);
    if (created_) down();
  }

  // Namespaces of earlier runs whose test process is gone (killed by a
  // timeout, say): the same scheme, another pid.
  void removeLeftovers() {
    static const std::regex name(R"(^kf(\d+)h(\d+|br|v\d+)$)");
    std::set<pid_t> stale;
    for (const auto& line :
         launcher::testing::splitLines(capture("ip netns list; ip -o link show"))) {
      std::string word = line;
      if (auto colon = line.find(": "); colon != std::string::npos && isdigit(line[0])) {
        word = line.substr(colon + 2);  // "7: kf123hbr: <...>"
        word = word.substr(0, word.find_first_of(":@"));
      }
      word = word.substr(0, word.find(' '));
      std::smatch m;
      if (!std::regex_match(word, m, name)) continue;
      pid_t pid = std::stoi(m[1]);
      if (pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH) stale.insert(pid);
    }
    for (pid_t pid : stale) {
      run(script_ + " down " + prefixOf(pid) + " >/dev/null 2>&1");
      for (int i : {1, 2})
        run("ip link del " + prefixOf(pid) + "v" + std::to_string(i) + " >/dev/null 2>&1");
    }
  }
  // Also deletes the bridge-side veths: a namespace whose sockets still
  // retransmit over a link that was down outlives `ip netns del` (the kernel
  // frees it once they time out), and so does its veth pair.
  void down() {
    run(script_ + " down " + prefix_ + " >/dev/null 2>&1");
    for (int i : {1, 2})
      run("ip link del " + prefix_ + "v" + std::to_string(i) + " >/dev/null 2>&1");
  }

  std::string addr(int host) const { return "10.77." + net_ + "." + std::to_string(host); }
  // The second host's link, on the bridge side (in this namespace).
  std::string veth() const { return prefix_ + "v2"; }

  // tc QDISC on veth(), or skip naming why not.
  void addQdisc(const std::string& qdisc, const std::string& why) {
    if (!run("command -v tc >/dev/null 2>&1")) {
      GTEST_SKIP() << "`tc` (Debian package iproute2) is missing; " << why << " did not run";
    }
    std::string said = capture("tc qdisc add dev " + veth() + " root " + qdisc);
    if (said.find("Specified qdisc kind is unknown") != std::string::npos) {
      GTEST_SKIP() << "this kernel has no '" << qdisc.substr(0, qdisc.find(' '))
                   << "' queueing discipline (for netem: CONFIG_NET_SCH_NETEM / module "
                      "sch_netem); "
                   << why << " did not run";
    }
    ASSERT_TRUE(run("tc qdisc show dev " + veth() + " | grep -q '" +
                    qdisc.substr(0, qdisc.find(' ')) + "'"))
        << "tc qdisc add dev " << veth() << " root " << qdisc << ": " << said;
  }

  std::vector<std::string> kolorunArgs(const std::vector<std::string>& workerArgs) const {
    std::vector<std::string> argv = {kolorunPath(),
                                     "-H",
                                     addr(2) + ":2," + addr(3) + ":1",
                                     "--rsh",
                                     std::string(sourceDir()) + "/scripts/netns-rsh.sh",
                                     "--timeout-seconds",
                                     std::to_string(kTimeoutSeconds),
                                     "--grace-seconds",
                                     "3",
                                     faultWorkerPath(),
                                     "--width",
                                     std::to_string(kWidth),
                                     "--print-every",
                                     "10",
                                     "--max-seconds",
                                     "45",
                                     "--marker",
                                     marker_};
    argv.insert(argv.end(), workerArgs.begin(), workerArgs.end());
    return argv;
  }

  // Training that must succeed: exit 0 and every rank printed the same
  // parameter checksum. fault(), if given, runs once rank 2 reached step 10.
  void expectTrainingSucceeds(const std::string& what, const std::function<void()>& fault = {}) {
    Watchdog dog(what, kSoftLimit, kHardLimit, marker_);
    Running job(kolorunArgs({"--steps", std::to_string(kSteps)}));
    dog.watch(job.pid());
    const auto start = std::chrono::steady_clock::now();
    if (fault) {
      ASSERT_TRUE(job.waitForOutput("[2]<stdout>:STEP rank=2 step=10", seconds(30))) << job.out();
      fault();
    }
    RunResult r = job.wait(kHardLimit - seconds(5));
    dog.stop();
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string all = r.out + r.err;
    EXPECT_FALSE(dog.terminated())
        << what << ": still running after " << kSoftLimit.count() << " s; sent SIGTERM\n"
        << all;
    EXPECT_EQ(r.exitCode, 0) << all;
    auto sums = checksumsIn(r.out);
    ASSERT_EQ(sums.size(), 3u) << "not every rank finished\n" << all;
    EXPECT_EQ(sums[0], sums[1]) << all;
    EXPECT_EQ(sums[0], sums[2]) << all;
    const int kb = ((32 + 1) * kWidth + (kWidth + 1) * kWidth + (kWidth + 1) * 8) * 4 / 1000;
    std::printf(
        "[net] %s: %d steps of %d KB gradients on 3 ranks, %.1f s from start to exit; "
        "checksums %s %s %s\n",
        what.c_str(), kSteps, kb, took, sums[0].c_str(), sums[1].c_str(), sums[2].c_str());
    EXPECT_TRUE(waitForNoProcessesWith(marker_, seconds(10)).empty()) << all;
  }

  std::string script_, prefix_, net_, marker_;
  bool created_ = false;
  ScratchDir scratch_;
};

TEST_F(NetworkFault, LinkDownFailsEverySurvivorNamingTheUnreachableRank) {
  const std::string faultFile = scratch_.path() + "/fault-time";
  Watchdog dog("link down", kSoftLimit, kHardLimit, marker_);
  Running job(kolorunArgs({"--fault-time-file", faultFile}));
  dog.watch(job.pid());
  ASSERT_TRUE(job.waitForOutput("[2]<stdout>:STEP rank=2 step=10", seconds(30))) << job.out();
  writeFaultTime(faultFile, realtimeMs());
  ASSERT_TRUE(run("ip link set " + veth() + " down"));
  RunResult r = job.wait(kHardLimit - seconds(5));
  const int64_t exitAfterMs = realtimeMs() - readFaultTime(faultFile);
  dog.stop();
  const std::string all = r.out + r.err;

  EXPECT_FALSE(dog.terminated()) << "still running after " << kSoftLimit.count()
                                 << " s; sent SIGTERM\n"
                                 << all;
  EXPECT_NE(r.exitCode, 0) << all;
  EXPECT_EQ(lastLine(r.err).rfind("kolorun: rank ", 0), 0u) << all;
  // kolorun exits once the survivors have; rank 2, cut off, is stopped
  // through its remote shell (SIGTERM, grace, SIGKILL).
  EXPECT_LE(exitAfterMs, kDetectBoundMs + 3000 + 10000) << all;
  auto survivors = survivorsIn(r.out);
  long long worst = -1;
  for (int rank : {0, 1}) {
    auto it = survivors.find(rank);
    if (it == survivors.end()) {
      ADD_FAILURE() << "rank " << rank << " printed no SURVIVOR line\n" << all;
      continue;
    }
    EXPECT_NE(it->second.error.find("rank 2"), std::string::npos)
        << "rank " << rank << "'s error does not name rank 2: " << it->second.error;
    EXPECT_GE(it->second.detectedMs, 0);
    EXPECT_LE(it->second.detectedMs, kDetectBoundMs) << it->second.error;
    worst = std::max(worst, it->second.detectedMs);
  }
  std::printf(
      "[detect] gloo link-down np=3 (rank 2's host): survivors max %lld ms; kolorun exit "
      "%lld ms after the fault (code %d)\n",
      worst, static_cast<long long>(exitAfterMs), r.exitCode);
  for (const auto& [rank, s] : survivors) {
    std::printf("[detect]   rank %d (%lld ms): %s\n", rank, s.detectedMs, s.error.c_str());
  }
  std::printf("[detect]   %s\n", lastLine(r.err).c_str());
  auto left = waitForNoProcessesWith(marker_, seconds(10));
  EXPECT_TRUE(left.empty()) << left.size() << " process(es) left behind\n" << all;
}

TEST_F(NetworkFault, LinkDownForOneSecondIsRiddenOut) {
  expectTrainingSucceeds("link down for 1 s", [this] {
    ASSERT_TRUE(run("ip link set " + veth() + " down"));
    std::this_thread::sleep_for(seconds(1));
    ASSERT_TRUE(run("ip link set " + veth() + " up"));
  });
}

TEST_F(NetworkFault, Delay20msStillTrainsCorrectly) {
  addQdisc("netem delay 20ms", "the 20 ms delay case");
  if (IsSkipped() || HasFatalFailure()) return;
  expectTrainingSucceeds("netem delay 20ms");
}

TEST_F(NetworkFault, Loss5PercentStillTrainsCorrectly) {
  addQdisc("netem loss 5%", "the 5% loss case");
  if (IsSkipped() || HasFatalFailure()) return;
  expectTrainingSucceeds("netem loss 5%");
}

TEST_F(NetworkFault, SlowLinkStillTrainsCorrectly) {
  addQdisc("tbf rate 50mbit burst 64kb latency 100ms", "the 50 Mbit/s case");
  if (IsSkipped() || HasFatalFailure()) return;
  expectTrainingSucceeds("tbf rate 50mbit");
}

// Hierarchical collectives: two "hosts" of two ranks each (ranks 0, 1 on
// the first, 2, 3 on the second), shared memory within a host and Gloo
// across (tests/core/mp_worker.cc scenarios).
class HierarchicalAcrossHosts : public NetworkFault {
 protected:
  std::vector<std::string> hierarchicalArgs(const std::string& scenario) const {
    return {kolorunPath(),
            "-H",
            addr(2) + ":2," + addr(3) + ":2",
            "--rsh",
            std::string(sourceDir()) + "/scripts/netns-rsh.sh",
            "--timeout-seconds",
            "3",
            "--grace-seconds",
            "5",
            KOLO_MP_WORKER,
            scenario,
            marker_};
  }

  // "[r]<stdout>:ERROR: ..." lines by rank.
  static std::map<int, std::string> errorsIn(const std::string& out) {
    static const std::regex line(R"(\[(\d+)\]<stdout>:ERROR: (.*)$)");
    std::map<int, std::string> found;
    for (const auto& l : launcher::testing::splitLines(out)) {
      std::smatch m;
      if (std::regex_search(l, m, line)) found[std::stoi(m[1])] = m[2];
    }
    return found;
  }

  // Rank 1 (first host) is killed or stopped 300 ms into back-to-back
  // 64 MB allreduces: every survivor, on both hosts, names it. (Which plane
  // notices first, shared memory, Gloo across hosts or the control channel,
  // depends on the moment; the [detect] lines show it.)
  void expectLostRankNamed(const std::string& scenario) {
    Watchdog dog(scenario, kSoftLimit, kHardLimit, marker_);
    Running job(hierarchicalArgs(scenario), {"KOLO_LOG_LEVEL=error"});
    dog.watch(job.pid());
    const auto start = std::chrono::steady_clock::now();
    RunResult r = job.wait(kHardLimit - seconds(5));
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    dog.stop();
    const std::string all = r.out + r.err;
    EXPECT_FALSE(dog.terminated()) << all;
    EXPECT_NE(r.exitCode, 0) << all;
    auto errors = errorsIn(r.out);
    for (int rank : {0, 2, 3}) {
      auto it = errors.find(rank);
      if (it == errors.end()) {
        ADD_FAILURE() << "rank " << rank << " printed no ERROR line\n" << all;
        continue;
      }
      EXPECT_NE(it->second.find("rank 1 stopped responding"), std::string::npos)
          << "rank " << rank << ": " << it->second;
    }
    std::printf("[detect] hierarchical %s (2 hosts x 2 ranks, KOLO_TIMEOUT=3): kolorun exited "
                "after %.1f s\n",
                scenario.c_str(), took);
    for (const auto& [rank, e] : errors) std::printf("[detect]   rank %d: %s\n", rank, e.c_str());
    EXPECT_TRUE(waitForNoProcessesWith(marker_, seconds(10)).empty()) << all;
  }
};

TEST_F(HierarchicalAcrossHosts, EveryOpMatchesTheReference) {
  Watchdog dog("hierarchical every-op", kSoftLimit, kHardLimit, marker_);
  Running job(hierarchicalArgs("every-op"), {"KOLO_LOG_LEVEL=debug"});
  dog.watch(job.pid());
  RunResult r = job.wait(kHardLimit - seconds(5));
  dog.stop();
  const std::string all = r.out + r.err;
  EXPECT_EQ(r.exitCode, 0) << all;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find("EVERY-OP rank=" + std::to_string(rank) + " size=4"), std::string::npos)
        << all;
  }
  // Every rank built the two-level data plane.
  size_t planes = 0;
  for (size_t at = 0; (at = all.find("cpu data plane hierarchical (2 hosts of 2 ranks", at)) !=
                      std::string::npos;
       ++at) {
    ++planes;
  }
  EXPECT_EQ(planes, 4u) << all;
}

// The docs' example (docs/running/kolorun.md): hosts by namespace name,
// which kolorun reaches over the bridge and whose ranks have eth0. Each
// host takes the first interface of the list it has, and the job trains.
TEST_F(HierarchicalAcrossHosts, HostsByNamespaceNameWithAnInterfaceListTrain) {
  Watchdog dog("hosts by name", kSoftLimit, kHardLimit, marker_);
  std::vector<std::string> args = hierarchicalArgs("sum");
  args[2] = prefix_ + "1:2," + prefix_ + "2:2";
  args.insert(args.begin() + 3, {"--network-interfaces", prefix_ + "br,eth0"});
  Running job(args);
  dog.watch(job.pid());
  RunResult r = job.wait(kHardLimit - seconds(5));
  dog.stop();
  const std::string all = r.out + r.err;
  EXPECT_EQ(r.exitCode, 0) << all;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find("[" + std::to_string(rank) + "]<stdout>:OK"), std::string::npos) << all;
  }
}

TEST_F(HierarchicalAcrossHosts, KilledRankIsNamedOnBothHosts) {
  expectLostRankNamed("kill-mid");
}

TEST_F(HierarchicalAcrossHosts, StoppedRankIsNamedOnBothHosts) {
  expectLostRankNamed("stop-mid");
}

// Real ssh (issue 35): an sshd (Debian's openssh-server) in each namespace
// host, key authentication, and kolorun without --rsh, as on a cluster. The
// only stand-in is the client's settings: an `ssh` first on PATH that adds
// `-F <this test's ssh_config>` (its key, its known hosts, user root) and
// execs /usr/bin/ssh. kolorun and mpirun both start ssh from PATH.
class RealSsh : public HierarchicalAcrossHosts {
 protected:
  void SetUp() override {
    HierarchicalAcrossHosts::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (access("/usr/sbin/sshd", X_OK) != 0 || access("/usr/bin/ssh-keygen", X_OK) != 0) {
      GTEST_SKIP() << "no /usr/sbin/sshd (Debian package openssh-server, which "
                      "scripts/install-deps.sh installs); the real-ssh tests did not run";
    }
    const std::string d = scratch_.path();
    ASSERT_TRUE(run("mkdir -p /run/sshd " + d + "/bin && ssh-keygen -q -t ed25519 -N '' -f " + d +
                    "/host_key && ssh-keygen -q -t ed25519 -N '' -f " + d + "/id && cp " + d +
                    "/id.pub " + d + "/authorized_keys"));
    const std::string hostKey = capture("cat " + d + "/host_key.pub");
    std::string knownHosts;
    for (int host : {2, 3}) knownHosts += addr(host) + " " + hostKey;
    writeFile(d + "/known_hosts", knownHosts);
    writeFile(d + "/ssh_config", "Host *\n  User root\n  IdentityFile " + d + "/id\n" +
                                     "  IdentitiesOnly yes\n  UserKnownHostsFile " + d +
                                     "/known_hosts\n  StrictHostKeyChecking yes\n");
    writeFile(d + "/bin/ssh", "#!/bin/sh\nexec /usr/bin/ssh -F " + d + "/ssh_config \"$@\"\n");
    ASSERT_TRUE(run("chmod 755 " + d + "/bin/ssh"));
    for (int i : {1, 2}) {
      const std::string ns = prefix_ + std::to_string(i);
      writeFile(d + "/sshd_" + ns, "ListenAddress " + addr(i + 1) + "\nHostKey " + d +
                                       "/host_key\nAuthorizedKeysFile " + d +
                                       "/authorized_keys\nPermitRootLogin prohibit-password\n"
                                       "PasswordAuthentication no\nKbdInteractiveAuthentication "
                                       "no\nUsePAM no\nStrictModes no\nPidFile " +
                                       d + "/sshd_" + ns + ".pid\n");
      std::string said = capture("ip netns exec " + ns + " /usr/sbin/sshd -f " + d + "/sshd_" + ns);
      if (!said.empty() && access((d + "/sshd_" + ns + ".pid").c_str(), F_OK) != 0) {
        GTEST_SKIP() << "sshd did not start in " << ns << ": " << said
                     << "; the real-ssh tests did not run";
      }
    }
    path_ = getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin";
    setenv("PATH", (d + "/bin:" + path_).c_str(), 1);
    // Each sshd answers once it listens (bounded: 10 s each).
    for (int host : {2, 3}) {
      bool up = false;
      for (int k = 0; k < 100 && !up; ++k) {
        up = run("ssh -o BatchMode=yes -o ConnectTimeout=2 " + addr(host) + " true 2>/dev/null");
        if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      ASSERT_TRUE(up) << "ssh " << addr(host) << " true: "
                      << capture("ssh -o BatchMode=yes " + addr(host) + " true");
    }
  }
  void TearDown() override {
    if (!path_.empty()) setenv("PATH", path_.c_str(), 1);
    for (int i : {1, 2}) {
      run("kill $(cat " + scratch_.path() + "/sshd_" + prefix_ + std::to_string(i) +
          ".pid 2>/dev/null) 2>/dev/null");
    }
    HierarchicalAcrossHosts::TearDown();
  }
  static void writeFile(const std::string& path, const std::string& text) {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr) << path;
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  // kolorun [extra] -H both hosts KOLO_MP_WORKER sum: trains 20 steps and
  // every rank prints OK.
  void expectTrains(const std::vector<std::string>& extra, int ranksPerHost) {
    std::vector<std::string> argv = {kolorunPath()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const std::string slots = ":" + std::to_string(ranksPerHost);
    argv.insert(argv.end(), {"-H", addr(2) + slots + "," + addr(3) + slots, "--timeout-seconds",
                             "10", KOLO_MP_WORKER, "sum", marker_});
    Watchdog dog("real ssh", kSoftLimit, kHardLimit, marker_);
    Running job(argv);
    dog.watch(job.pid());
    RunResult r = job.wait(kHardLimit - seconds(5));
    dog.stop();
    const std::string all = r.out + r.err;
    EXPECT_EQ(r.exitCode, 0) << all;
    for (int rank = 0; rank < 2 * ranksPerHost; ++rank) {
      // kolorun tags "[r]", mpirun "[job,r]".
      const std::string tag = std::to_string(rank) + "]<stdout>:OK";
      EXPECT_TRUE(r.out.find("[" + tag) != std::string::npos ||
                  r.out.find("," + tag) != std::string::npos)
          << all;
    }
    EXPECT_TRUE(waitForNoProcessesWith(marker_, seconds(10)).empty()) << all;
  }
  std::string path_;
};

TEST_F(RealSsh, KolorunStartsRanksOnBothHostsOverSsh) { expectTrains({}, 2); }

TEST_F(RealSsh, KolorunMpiStartsRanksOnBothHostsOverSsh) {
  if (!run("command -v mpirun >/dev/null 2>&1")) {
    GTEST_SKIP() << "no mpirun (Debian package openmpi-bin); kolorun --mpi over ssh did not run";
  }
  expectTrains({"--mpi"}, 1);
}

}  // namespace
}  // namespace kolo::reliability
