// kolorun --mpi: the mpirun command it builds (pure), a real job of two
// ranks of a kolo program started through it, and a signal to kolorun
// ending the job.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "launcher_test_util.h"
#include "mpi_command.h"
#include "options.h"
#include "usage_error.h"

namespace kolo::launcher {
namespace {

Options parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kolorun");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  auto parsed = parseCommandLine(static_cast<int>(argv.size()), argv.data());
  return *parsed.options;
}

std::vector<std::string> command(std::vector<std::string> args, bool root = false) {
  MpiCommandContext context;
  context.mpirun = "/usr/bin/mpirun";
  context.isRoot = root;
  context.servesStore = true;
  return mpirunCommand(parse(std::move(args)), context);
}

TEST(KolorunMpi, LocalJobCommand) {
  EXPECT_EQ(command({"-np", "2", "--mpi", "./train", "--epochs", "3"}),
            (std::vector<std::string>{"/usr/bin/mpirun", "-np", "2", "-H", "localhost:2",
                                      "--bind-to", "none", "--tag-output", "-x",
                                      "KOLO_CONTROLLER=mpi", "-x", "KOLO_CPU_OPERATIONS=mpi",
                                      "-x", "KOLO_RENDEZVOUS_ADDR", "-x", "KOLO_RENDEZVOUS_PORT",
                                      "-x", "KOLO_SECRET_KEY", "-x", "KOLO_RENDEZVOUS_HOSTED",
                                      "./train", "--epochs", "3"}));
}

TEST(KolorunMpi, RootHostsTuningAndUserEnv) {
  auto argv = command(
      {"-np", "6", "--mpi", "-H", "a:2,b:2", "--fusion-threshold-mb", "4", "--timeout-seconds",
       "30", "-x", "FOO=bar", "-x", "PATH", "--rsh", "my-rsh", "-p", "2222", "prog"},
      true);
  EXPECT_EQ(describeCommand(argv),
            "/usr/bin/mpirun --allow-run-as-root -np 6 -H a:2,b:2 --oversubscribe --bind-to none "
            "--tag-output --mca plm_rsh_agent my-rsh --mca plm_rsh_args '-p 2222' "
            "-x KOLO_FUSION_THRESHOLD=4194304 -x KOLO_TIMEOUT=30 -x KOLO_CONTROLLER=mpi "
            "-x KOLO_CPU_OPERATIONS=mpi -x KOLO_RENDEZVOUS_ADDR -x KOLO_RENDEZVOUS_PORT "
            "-x KOLO_SECRET_KEY -x KOLO_RENDEZVOUS_HOSTED -x FOO=bar -x PATH prog");
}

TEST(KolorunMpi, StoreVariablesTravelByNameNeverByValue) {
  // mpirun copies each from its own environment, where kolorun put it: the
  // secret is on no command line.
  int named = 0;
  for (const auto& a : command({"-np", "2", "--mpi", "--port", "4000", "prog"})) {
    if (a.find("KOLO_RENDEZVOUS") != std::string::npos || a.find("SECRET") != std::string::npos) {
      EXPECT_EQ(a.find('='), std::string::npos) << a;
      ++named;
    }
    EXPECT_EQ(a.find("4000"), std::string::npos) << a;
  }
  EXPECT_EQ(named, 4);
  // horovodrun takes --start-timeout with MPI too: accepted, with a notice.
  EXPECT_EQ(command({"-np", "2", "--mpi", "--start-timeout", "5", "prog"}),
            command({"-np", "2", "--mpi", "prog"}));
  EXPECT_THROW(command({"-np", "2", "--mpi", "--grace-seconds", "9", "prog"}), UsageError);
}

TEST(KolorunMpi, SlotsFromHostsWhenNpIsMissing) {
  auto argv = command({"--mpi", "-H", "localhost:3", "prog"});
  EXPECT_EQ(argv[1], "-np");
  EXPECT_EQ(argv[2], "3");
}

struct ShellRun {
  int exitCode = -1;
  std::string out;
};

ShellRun runShell(const std::string& line) {
  ShellRun r;
  FILE* p = popen((line + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

TEST(KolorunMpi, TwoRankJobOfAKoloProgram) {
  // Cleared so that only kolorun --mpi decides the backends and the store.
  ShellRun r =
      runShell("env -u KOLO_CONTROLLER -u KOLO_CPU_OPERATIONS -u KOLO_SECRET_KEY " +
               std::string(KOLO_TEST_KOLORUN) + " --mpi -np 2 --verbose " + KOLO_TEST_MPI_PROBE);
  EXPECT_EQ(r.exitCode, 0) << r.out;
  EXPECT_NE(r.out.find("kolorun: "), std::string::npos) << "--verbose prints the command";
  EXPECT_NE(r.out.find("--tag-output"), std::string::npos) << r.out;
  for (int rank : {0, 1}) {
    const std::string line = "[1," + std::to_string(rank) + "]<stdout>:probe rank " +
                             std::to_string(rank) +
                             " of 2: sum 3, controller mpi, cpu operations mpi, secret SET, "
                             "store served by kolorun";
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
}

// Live rank processes "sleep <seconds>" (kolorun's and mpirun's command
// lines hold the same words, after others).
size_t sleepers(const std::string& seconds) {
  const std::string cmdline = std::string("sleep") + '\0' + seconds + '\0';
  size_t n = 0;
  for (pid_t pid : testing::processesWith(seconds)) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text == cmdline) ++n;
  }
  return n;
}

TEST(KolorunMpi, SignalToKolorunEndsTheJob) {
  // Rank programs whose command line is unique to this test.
  const std::string seconds = "47." + std::to_string(getpid());
  testing::Running run({KOLO_TEST_KOLORUN, "--mpi", "-np", "2", "sleep", seconds});
  const auto upBy = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (sleepers(seconds) < 2 && std::chrono::steady_clock::now() < upBy) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(sleepers(seconds), 2u) << "the ranks never started";
  run.signal(SIGTERM);  // from another process, as a batch system would
  auto r = run.wait(std::chrono::seconds(30));
  EXPECT_FALSE(r.timedOut) << "kolorun --mpi ignored SIGTERM\n" << r.out << r.err;
  EXPECT_NE(r.exitCode, 0) << r.out << r.err;
  const auto goneBy = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sleepers(seconds) > 0 && std::chrono::steady_clock::now() < goneBy) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(sleepers(seconds), 0u) << "ranks left behind\n" << r.out << r.err;
}

}  // namespace
}  // namespace kolo::launcher
