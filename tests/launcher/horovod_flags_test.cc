// kolorun takes horovodrun 0.28.1's command line: every flag either maps to
// kolo's setting (the KOLO_* variable its workers get) or is accepted with a
// notice; --config-file reads Horovod's YAML schema; --check-build reports
// this build. Pure parsing plus a few real kolorun runs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "check_build.h"
#include "config_file.h"
#include "job.h"
#include "kolo/build_config.h"
#include "launcher_test_util.h"
#include "mpi_command.h"
#include "options.h"
#include "tuning_env.h"
#include "usage_error.h"
#include "worker_env.h"

namespace kolo::launcher {
namespace {

EnvLookup envOf(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

Options parse(std::vector<std::string> args, const EnvLookup& env = envOf({})) {
  args.insert(args.begin(), "kolorun");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  auto parsed = parseCommandLine(static_cast<int>(argv.size()), argv.data(), env);
  EXPECT_TRUE(parsed.options.has_value());
  return parsed.options.value_or(Options{});
}

std::string parseError(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

std::map<std::string, std::string> envMap(const Options& o) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : tuningEnv(o)) m[k] = v;
  return m;
}

std::string notices(const Options& o) {
  std::string all;
  for (const auto& n : o.notices) all += n + "\n";
  return all;
}

// Each horovodrun flag that kolo follows, and what its workers get.
TEST(HorovodFlags, FollowedFlagsSetKolosVariables) {
  struct Case {
    std::vector<std::string> flags;
    std::map<std::string, std::string> env;
  };
  const std::vector<Case> cases = {
      {{"--fusion-threshold-mb", "32"}, {{"KOLO_FUSION_THRESHOLD", "33554432"}}},
      {{"--cycle-time-ms", "2.5"}, {{"KOLO_CYCLE_TIME", "2.5"}}},
      {{"--cache-capacity", "2048"}, {{"KOLO_CACHE_CAPACITY", "2048"}}},
      {{"--hierarchical-allreduce"}, {{"KOLO_HIERARCHICAL_ALLREDUCE", "1"}}},
      {{"--no-hierarchical-allreduce"}, {{"KOLO_HIERARCHICAL_ALLREDUCE", "0"}}},
      {{"--hierarchical-allgather"}, {{"KOLO_HIERARCHICAL_ALLGATHER", "1"}}},
      {{"--no-hierarchical-allgather"}, {{"KOLO_HIERARCHICAL_ALLGATHER", "0"}}},
      {{"--autotune"}, {{"KOLO_AUTOTUNE", "1"}}},
      {{"--no-autotune"}, {{"KOLO_AUTOTUNE", "0"}}},
      {{"--autotune-log-file", "/tmp/a.csv"}, {{"KOLO_AUTOTUNE_LOG", "/tmp/a.csv"}}},
      {{"--autotune-warmup-samples", "5"}, {{"KOLO_AUTOTUNE_WARMUP_SAMPLES", "5"}}},
      {{"--timeline-filename", "/tmp/t.json"}, {{"KOLO_TIMELINE", "/tmp/t.json"}}},
      {{"--timeline-mark-cycles"}, {{"KOLO_TIMELINE_MARK_CYCLES", "1"}}},
      {{"--no-timeline-mark-cycles"}, {{"KOLO_TIMELINE_MARK_CYCLES", "0"}}},
      {{"--no-stall-check"}, {{"KOLO_STALL_CHECK_TIME", "0"}, {"KOLO_STALL_SHUTDOWN_TIME", "0"}}},
      {{"--stall-check"}, {}},
      {{"--stall-check-warning-time-seconds", "120"}, {{"KOLO_STALL_CHECK_TIME", "120"}}},
      {{"--stall-check-shutdown-time-seconds", "240"}, {{"KOLO_STALL_SHUTDOWN_TIME", "240"}}},
      // Horovod shuts down only after the warning (default 60 s).
      {{"--stall-check-shutdown-time-seconds", "30"}, {{"KOLO_STALL_SHUTDOWN_TIME", "0"}}},
      {{"--stall-check-warning-time-seconds", "10", "--stall-check-shutdown-time-seconds", "30"},
       {{"KOLO_STALL_CHECK_TIME", "10"}, {"KOLO_STALL_SHUTDOWN_TIME", "30"}}},
      {{"--gloo-timeout-seconds", "45"}, {{"KOLO_TIMEOUT", "45"}}},
      {{"--gloo-timeout-seconds", "45", "--timeout-seconds", "9"}, {{"KOLO_TIMEOUT", "9"}}},
      {{"--log-level", "INFO"}, {{"KOLO_LOG_LEVEL", "info"}}},
      {{"--log-level", "WARNING"}, {{"KOLO_LOG_LEVEL", "warning"}}},
      {{"--log-level", "FATAL"}, {{"KOLO_LOG_LEVEL", "error"}}},
      {{"--log-level", "trace"}, {{"KOLO_LOG_LEVEL", "trace"}}},
      {{"--log-with-timestamp"}, {{"KOLO_LOG_HIDE_TIME", "0"}}},
      {{"--log-without-timestamp"}, {{"KOLO_LOG_HIDE_TIME", "1"}}},
      {{"--log-hide-timestamp"}, {{"KOLO_LOG_HIDE_TIME", "1"}}},
      {{"--no-log-hide-timestamp"}, {{"KOLO_LOG_HIDE_TIME", "0"}}},
      {{"--network-interface", "eth1"}, {{"KOLO_IFACE", "eth1"}, {"NCCL_SOCKET_IFNAME", "eth1"}}},
      {{"--network-interfaces", "eth1,eth2"},
       {{"KOLO_IFACE", "eth1,eth2"}, {"NCCL_SOCKET_IFNAME", "eth1,eth2"}}},
      {{"--network-interface", "eth2", "--network-interface", "eth1"},
       {{"KOLO_IFACE", "eth2,eth1"}, {"NCCL_SOCKET_IFNAME", "eth2,eth1"}}},
      {{"--tcp"}, {{"NCCL_IB_DISABLE", "1"}}},
      {{"--gloo"}, {{"KOLO_CONTROLLER", "gloo"}, {"KOLO_CPU_OPERATIONS", "gloo"}}},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"-np", "2"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    args.push_back("prog");
    std::string what;
    for (const auto& f : c.flags) what += f + " ";
    EXPECT_EQ(envMap(parse(args)), c.env) << what;
  }
}

// Each horovodrun flag that kolo accepts without following it says so.
TEST(HorovodFlags, AcceptedFlagsPrintWhatKoloDoesInstead) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--disable-cache"}, "--disable-cache: kolorun caches no start-up checks"},
      {{"--jsrun"}, "--jsrun: kolo does not start jobs through jsrun"},
      {{"--torus-allreduce"}, "--torus-allreduce: kolo has no NCCL torus"},
      {{"--no-torus-allreduce"}, "--no-torus-allreduce: kolo has no NCCL torus"},
      {{"--autotune-steps-per-sample", "20"}, "KOLO_AUTOTUNE_SAMPLE_TIME"},
      {{"--autotune-bayes-opt-max-samples", "40"}, "not by Bayesian optimisation"},
      {{"--autotune-gaussian-process-noise", "0.9"}, "no Gaussian process"},
      {{"--mpi-threads-disable"},
       "--mpi-threads-disable: kolo initialises MPI with MPI_THREAD_SERIALIZED"},
      {{"--no-mpi-threads-disable"}, "--no-mpi-threads-disable: kolo initialises MPI"},
      {{"--mpi-args=--map-by ppr:2:node"}, "--mpi-args: used only with --mpi"},
      {{"--binding-args", "--bind-to core"}, "--binding-args: used only with --mpi"},
      {{"--num-nccl-streams", "2"}, "--num-nccl-streams: kolo runs GPU collectives on one"},
      {{"--thread-affinity", "1"}, "--thread-affinity: kolo does not pin"},
      {{"--log-level", "FATAL"}, "kolo has no fatal level"},
      {{"--log-hide-timestamp"}, "deprecated in Horovod; use --log-without-timestamp"},
      {{"--network-interface", "eth0,eth1"}, "a list is deprecated in Horovod"},
      {{"--no-stall-check", "--stall-check-warning-time-seconds", "5"},
       "its time flags have no effect"},
      {{"--gloo-timeout-seconds", "5", "--timeout-seconds", "6"},
       "--timeout-seconds (KOLO_TIMEOUT) is also given and wins"},
      {{"--autotune", "--cycle-time-ms", "2"},
       "--autotune: --cycle-time-ms: kolo's autotuner starts from the value given"},
  };
  for (const auto& [flags, expect] : cases) {
    std::vector<std::string> args = {"-np", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back("prog");
    Options o = parse(args);
    EXPECT_NE(notices(o).find(expect), std::string::npos) << flags.front() << ": " << notices(o);
    for (const auto& n : o.notices) EXPECT_EQ(n.find('\n'), std::string::npos) << n;
  }
  // Followed flags print nothing.
  EXPECT_TRUE(parse({"-np", "2", "--autotune", "--hierarchical-allreduce", "--tcp", "prog"})
                  .notices.empty());
}

TEST(HorovodFlags, SingleDashSpellingsVersionAndAliases) {
  std::ofstream("/tmp/kolo_hvd_hostfile_" + std::to_string(getpid())) << "localhost slots=2\n";
  Options o =
      parse({"-hostfile", "/tmp/kolo_hvd_hostfile_" + std::to_string(getpid()), "-prefix-timestamp",
             "--slots-per-host", "2", "--min-np", "1", "-np", "2", "prog", "-hostfile", "-cb"});
  std::remove(("/tmp/kolo_hvd_hostfile_" + std::to_string(getpid())).c_str());
  EXPECT_EQ(o.hostfile, "/tmp/kolo_hvd_hostfile_" + std::to_string(getpid()));
  EXPECT_TRUE(o.prefixTimestamp);
  EXPECT_EQ(o.slotsPerHost, 2);
  EXPECT_EQ(o.command, (std::vector<std::string>{"prog", "-hostfile", "-cb"}));
  EXPECT_TRUE(parse({"-np", "1", "--prefix-output-with-timestamp", "prog"}).prefixTimestamp);
  EXPECT_EQ(normalizeArgs({"-cb", "-np=3", "-hostfile=h", "--mpi-args", "--map-by x", "p", "-cb"},
                          {"--mpi-args"}),
            (std::vector<std::string>{"--check-build", "--num-proc=3", "--hostfile=h",
                                      "--mpi-args=--map-by x", "p", "-cb"}));
  EXPECT_EQ(parse({"-np", "1", "--binding-args", "--bind-to core", "prog"}).bindingArgs,
            "--bind-to core");
}

TEST(HorovodFlags, HorovodsTimeoutVariablesAreTheDefaults) {
  Options o = parse({"-np", "1", "prog"},
                    envOf({{"HOROVOD_START_TIMEOUT", "90"}, {"HOROVOD_ELASTIC_TIMEOUT", "33"}}));
  EXPECT_EQ(o.startTimeoutSeconds, 90);
  EXPECT_EQ(o.elasticTimeoutSeconds, 33);
  EXPECT_FALSE(o.startTimeoutGiven);
  o = parse({"-np", "1", "--start-timeout", "5", "prog"}, envOf({{"HOROVOD_START_TIMEOUT", "90"}}));
  EXPECT_EQ(o.startTimeoutSeconds, 5);
  EXPECT_EQ(parse({"-np", "1", "prog"}).startTimeoutSeconds, 30);
  try {
    parse({"-np", "1", "prog"}, envOf({{"HOROVOD_START_TIMEOUT", "soon"}}));
    ADD_FAILURE() << "HOROVOD_START_TIMEOUT=soon accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("HOROVOD_START_TIMEOUT='soon'"), std::string::npos);
  }
}

TEST(HorovodFlags, BadValuesAreClearErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--autotune-gaussian-process-noise", "1.5"},
       "--autotune-gaussian-process-noise must be in [0, 1]"},
      {{"--num-nccl-streams", "-1"}, "--num-nccl-streams must be zero or more"},
      {{"--thread-affinity", "-2"}, "--thread-affinity must be zero or more"},
      {{"--autotune-warmup-samples", "-1"}, "--autotune-warmup-samples must be zero or more"},
      {{"--autotune-steps-per-sample", "x"}, "--autotune-steps-per-sample"},
      {{"--gloo-timeout-seconds", "0"}, "--gloo-timeout-seconds must be positive"},
      {{"--cache-capacity", "-3"}, "--cache-capacity"},
      {{"--log-level", "LOUD"}, "--log-level"},
      {{"--network-interfaces", "eth0,,eth1"}, "expected interface names separated by commas"},
      {{"--hierarchical-allreduce", "--no-hierarchical-allreduce"}, "xcludes"},
      {{"--gloo", "--jsrun"}, "xcludes"},
  };
  for (const auto& [flags, expect] : cases) {
    std::vector<std::string> args = {"-np", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back("prog");
    std::string e = parseError(args);
    EXPECT_NE(e.find(expect), std::string::npos) << flags.front() << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(HorovodFlags, MpiRunGetsMpiArgsBindingArgsAndEveryInterface) {
  if (!KOLO_WITH_MPI) GTEST_SKIP() << "kolo was built without MPI (kolorun --mpi is refused)";
  MpiCommandContext context;
  context.mpirun = "/usr/bin/mpirun";
  Options o = parse({"-np", "2", "--mpi", "--start-timeout", "5", "--tcp",
                     "--mpi-args=--map-by ppr:1:core --report-bindings", "--binding-args",
                     "--bind-to socket", "--network-interfaces", "eth0,eth1", "prog"});
  EXPECT_EQ(describeCommand(mpirunCommand(o, context)),
            "/usr/bin/mpirun -np 2 -H localhost:2 --bind-to socket --tag-output --mca "
            "btl_tcp_if_include eth0,eth1 -x KOLO_IFACE=eth0,eth1 -x KOLO_CONTROLLER=mpi "
            "-x KOLO_CPU_OPERATIONS=mpi -x NCCL_SOCKET_IFNAME=eth0,eth1 -x NCCL_IB_DISABLE=1 "
            "--map-by ppr:1:core --report-bindings prog");
  EXPECT_NE(notices(o).find("--start-timeout: with --mpi"), std::string::npos) << notices(o);
  EXPECT_EQ(notices(o).find("--mpi-args"), std::string::npos) << notices(o);
}

TEST(HorovodFlags, OutputFoldersAreZeroPaddedLikeHorovods) {
  EXPECT_EQ(rankOutputDir(0, 1), "rank.0");
  EXPECT_EQ(rankOutputDir(3, 10), "rank.3");
  EXPECT_EQ(rankOutputDir(3, 11), "rank.03");
  EXPECT_EQ(rankOutputDir(10, 11), "rank.10");
  EXPECT_EQ(rankOutputDir(7, 1000), "rank.007");
}

// HOROVOD_* settings in kolorun's environment reach workers on other hosts
// too (as horovodrun forwards them), like KOLO_* ones.
TEST(HorovodFlags, HorovodVariablesTravelToRemoteWorkers) {
  EnvList remote =
      remoteWorkerEnv({"HOROVOD_CYCLE_TIME=5", "KOLO_TIMEOUT=9", "PATH=/bin", "MY_HOROVOD_THING=1"},
                      {{"KOLO_RANK", "1"}});
  std::map<std::string, std::string> m(remote.begin(), remote.end());
  EXPECT_EQ(m, (std::map<std::string, std::string>{
                   {"HOROVOD_CYCLE_TIME", "5"}, {"KOLO_TIMEOUT", "9"}, {"KOLO_RANK", "1"}}));
  if (!KOLO_WITH_MPI) return;
  MpiCommandContext context;
  context.mpirun = "/usr/bin/mpirun";
  context.forwardedNames = {"HOROVOD_CYCLE_TIME"};
  auto argv = mpirunCommand(parse({"-np", "1", "--mpi", "prog"}), context);
  auto x = std::find(argv.begin(), argv.end(), "HOROVOD_CYCLE_TIME");
  ASSERT_NE(x, argv.end()) << describeCommand(argv);
  EXPECT_EQ(*(x - 1), "-x");
}

// Horovod's own test file (test/single/data/config.test.yaml in 0.28.1).
constexpr const char* kHorovodTestYaml = R"(controller: gloo

params:
  fusion_threshold_mb: 32
  cycle_time_ms: 10
  cache_capacity: 2048
  hierarchical_allreduce: true
  hierarchical_allgather: true

autotune:
  enabled: true
  log_file: 'horovod_autotune_log.txt'
  warmup_samples: 5
  steps_per_sample: 20
  bayes_opt_max_samples: 50
  gaussian_process_noise: 0.9

timeline:
  filename: 'horovod_timeline.json'
  mark_cycles: true

stall_check:
  enabled: true
  warning_time_seconds: 120
  shutdown_time_seconds: 240

library_options:
  mpi_threads_disable: true
  num_nccl_streams: 2
  thread_affinity: 1
  gloo_timeout_seconds: 60


logging:
  level: INFO
  hide_timestamp: true
)";

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/tmp/kolo_hvd_config_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".yaml";
  }
  void TearDown() override { std::remove(path_.c_str()); }
  const std::string& write(const std::string& text) {
    std::ofstream(path_) << text;
    return path_;
  }
  std::string path_;
};

TEST_F(ConfigFile, HorovodsSchemaMapsToKolosSettings) {
  Options o = parse({"-np", "2", "--config-file", write(kHorovodTestYaml), "prog"});
  EXPECT_TRUE(o.gloo);
  EXPECT_EQ(envMap(o), (std::map<std::string, std::string>{
                           {"KOLO_FUSION_THRESHOLD", "33554432"},
                           {"KOLO_CYCLE_TIME", "10"},
                           {"KOLO_CACHE_CAPACITY", "2048"},
                           {"KOLO_HIERARCHICAL_ALLREDUCE", "1"},
                           {"KOLO_HIERARCHICAL_ALLGATHER", "1"},
                           {"KOLO_AUTOTUNE", "1"},
                           {"KOLO_AUTOTUNE_LOG", "horovod_autotune_log.txt"},
                           {"KOLO_AUTOTUNE_WARMUP_SAMPLES", "5"},
                           {"KOLO_TIMELINE", "horovod_timeline.json"},
                           {"KOLO_TIMELINE_MARK_CYCLES", "1"},
                           {"KOLO_STALL_CHECK_TIME", "120"},
                           {"KOLO_STALL_SHUTDOWN_TIME", "240"},
                           {"KOLO_TIMEOUT", "60"},
                           {"KOLO_LOG_LEVEL", "info"},
                           {"KOLO_LOG_HIDE_TIME", "1"},
                           {"KOLO_CONTROLLER", "gloo"},
                           {"KOLO_CPU_OPERATIONS", "gloo"},
                       }));
  // The settings kolo does not follow are noted, as their flags are.
  const std::string n = notices(o);
  for (const char* flag : {"--autotune-steps-per-sample", "--autotune-bayes-opt-max-samples",
                           "--autotune-gaussian-process-noise", "--mpi-threads-disable",
                           "--num-nccl-streams", "--thread-affinity"}) {
    EXPECT_NE(n.find(flag), std::string::npos) << flag << "\n" << n;
  }
}

// As in horovodrun: a flag on the command line wins over the file wherever
// it stands (before or after --config-file).
TEST_F(ConfigFile, CommandLineFlagsWinWhereverTheyStand) {
  const std::string& f = write(kHorovodTestYaml);
  Options o = parse({"-np", "2", "--fusion-threshold-mb", "256", "--config-file", f,
                     "--cycle-time-ms", "20", "--no-autotune", "--no-hierarchical-allgather",
                     "--log-with-timestamp", "--mpi-args=--x", "prog"});
  auto env = envMap(o);
  EXPECT_EQ(env["KOLO_FUSION_THRESHOLD"], "268435456");
  EXPECT_EQ(env["KOLO_CYCLE_TIME"], "20");
  EXPECT_EQ(env["KOLO_AUTOTUNE"], "0");
  EXPECT_EQ(env["KOLO_HIERARCHICAL_ALLGATHER"], "0");
  EXPECT_EQ(env["KOLO_HIERARCHICAL_ALLREDUCE"], "1");  // from the file
  EXPECT_EQ(env["KOLO_LOG_HIDE_TIME"], "0");
  EXPECT_EQ(env["KOLO_CACHE_CAPACITY"], "2048");
  // controller applies only without --gloo / --mpi.
  if (KOLO_WITH_MPI) {
    Options m = parse({"-np", "2", "--mpi", "--config-file", f, "prog"});
    EXPECT_TRUE(m.mpi);
    EXPECT_FALSE(m.gloo);
  }
}

TEST_F(ConfigFile, SectionsWithoutEnabledAndUnknownKeys) {
  Options o = parse({"-np", "2", "--config-file",
                     write("autotune:\n  log_file: a.csv\nstall_check:\n  warning_time_seconds: 5\n"
                           "params:\n  fusion_threshold_mb: 1\n  fusion_treshold_mb: 2\n"
                           "extras:\n  x: 1\nlogging:\n  level: fatal\n  with_timestamp: false\n"),
                     "prog"});
  auto env = envMap(o);
  EXPECT_EQ(env["KOLO_AUTOTUNE"], "0");          // autotune section without enabled: off
  EXPECT_EQ(env["KOLO_STALL_CHECK_TIME"], "5");  // stall_check without enabled: on
  EXPECT_EQ(env["KOLO_FUSION_THRESHOLD"], "1048576");
  EXPECT_EQ(env["KOLO_LOG_LEVEL"], "error");
  EXPECT_EQ(env["KOLO_LOG_HIDE_TIME"], "1");
  const std::string n = notices(o);
  EXPECT_NE(n.find("'params.fusion_treshold_mb' is not one of Horovod's settings"),
            std::string::npos)
      << n;
  EXPECT_NE(n.find("'extras' is not one of Horovod's settings"), std::string::npos) << n;
  EXPECT_NE(n.find("no fatal level"), std::string::npos) << n;

  o = parse({"-np", "2", "--config-file", write("stall_check:\n  enabled: false\n"), "prog"});
  EXPECT_EQ(envMap(o)["KOLO_STALL_CHECK_TIME"], "0");
  EXPECT_EQ(envMap(o)["KOLO_STALL_SHUTDOWN_TIME"], "0");
  EXPECT_TRUE(envMap(parse({"-np", "2", "--config-file", write(""), "prog"})).empty());
}

TEST_F(ConfigFile, MalformedFilesAreErrorsNamingFileKeyAndLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"params:\n  fusion_threshold_mb: [1, 2\n", ", line 3: not valid YAML"},  // at the end
      {"params:\n  cycle_time_ms: fast\n", ", line 2: params.cycle_time_ms: expected milliseconds"},
      {"params:\n  fusion_threshold_mb: -1\n",
       "params.fusion_threshold_mb: expected megabytes >= 0, got '-1'"},
      {"params:\n  cache_capacity: 1.5\n", "params.cache_capacity: expected an integer >= 0"},
      {"params:\n  hierarchical_allreduce: maybe\n",
       "params.hierarchical_allreduce: expected true or false"},
      {"autotune:\n  gaussian_process_noise: 2\n",
       "autotune.gaussian_process_noise: expected a number in [0, 1]"},
      {"timeline:\n  filename: [a, b]\n", "timeline.filename: expected a single value"},
      {"library_options:\n  gloo_timeout_seconds: 0\n", "library_options.gloo_timeout_seconds"},
      {"logging:\n  level: LOUD\n", "logging.level: expected one of TRACE"},
      {"controller: nccl\n", "controller: expected gloo or mpi, got 'nccl'"},
      {"params: 5\n", "params: expected a map of settings"},
      {"- a\n- b\n", "expected a map of Horovod's settings"},
  };
  for (const auto& [text, expect] : cases) {
    std::string e = parseError({"-np", "2", "--config-file", write(text), "prog"});
    EXPECT_NE(e.find("--config-file " + path_), std::string::npos) << e;
    EXPECT_NE(e.find(expect), std::string::npos) << text << " -> " << e;
  }
  std::string e = parseError({"-np", "2", "--config-file", "/nonexistent/h.yaml", "prog"});
  EXPECT_NE(e.find("--config-file /nonexistent/h.yaml: cannot read it"), std::string::npos) << e;
}

// --check-build: the build's own settings, in horovodrun's layout.
TEST(CheckBuild, ReportsThisBuild) {
  const std::string r = checkBuildReport();
  auto has = [&](bool on, const std::string& what) {
    return r.find(std::string("[") + (on ? "X" : " ") + "] " + what) != std::string::npos;
  };
  EXPECT_EQ(r.rfind("kolo v" KOLO_VERSION ":\n", 0), 0u) << r;
  EXPECT_TRUE(has(KOLO_BUILT_WITH_TORCH, "PyTorch")) << r;
  EXPECT_TRUE(has(false, "TensorFlow")) << r;
  EXPECT_TRUE(has(false, "MXNet")) << r;
  EXPECT_TRUE(has(KOLO_WITH_NCCL, "NCCL")) << r;
  EXPECT_TRUE(has(false, "DDL")) << r;
  EXPECT_TRUE(has(false, "CCL")) << r;
  EXPECT_TRUE(has(true, "Gloo")) << r;
  EXPECT_TRUE(has(KOLO_WITH_CUDA, "CUDA")) << r;
  EXPECT_TRUE(has(true, "Shared memory")) << r;
  // MPI twice: controller and tensor operations.
  const std::string mpi = std::string("[") + (KOLO_WITH_MPI ? "X" : " ") + "] MPI\n";
  size_t first = r.find(mpi);
  ASSERT_NE(first, std::string::npos) << r;
  EXPECT_NE(r.find(mpi, first + 1), std::string::npos) << r;
  EXPECT_LT(r.find("Available Controllers:"), first);
  EXPECT_EQ(checkBuildReport(true), "\n" + r);
}

}  // namespace

namespace testing {
namespace {

// The real kolorun: --check-build needs no -np or program; notices go to
// stderr; a config file's settings reach every worker.
TEST(HorovodFlagsJob, CheckBuildPrintsTheReportAndExits) {
  for (const char* flag : {"--check-build", "-cb"}) {
    auto r = runKolorun({flag});
    EXPECT_EQ(r.exitCode, 0) << r.err;
    EXPECT_EQ(r.out, checkBuildReport()) << flag;
  }
  auto v = runKolorun({"-v"});
  EXPECT_EQ(v.out, "kolorun (kolo) " KOLO_VERSION "\n");
}

TEST(HorovodFlagsJob, ConfigFileAndFlagsReachTheWorkersAndNoticesReachStderr) {
  const std::string path = "/tmp/kolo_hvd_job_" + std::to_string(getpid()) + ".yaml";
  std::ofstream(path) << "params:\n  cycle_time_ms: 7\n  cache_capacity: 99\n"
                         "library_options:\n  num_nccl_streams: 4\n";
  auto r = runKolorun({"-np", "2", "--config-file", path, "--cache-capacity", "5",
                       "--hierarchical-allreduce", "--disable-cache", probePath(), "env"});
  std::remove(path.c_str());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  auto env = envByRank(r.out);
  ASSERT_EQ(env.size(), 2u) << r.out;
  for (auto& [rank, vars] : env) {
    EXPECT_EQ(vars["KOLO_CYCLE_TIME"], "7") << rank;
    EXPECT_EQ(vars["KOLO_CACHE_CAPACITY"], "5") << rank;
    EXPECT_EQ(vars["KOLO_HIERARCHICAL_ALLREDUCE"], "1") << rank;
  }
  EXPECT_NE(r.err.find("kolorun: note: --disable-cache: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kolorun: note: --num-nccl-streams: "), std::string::npos) << r.err;
}

// A real kolo program under kolorun: the job's HOROVOD_* settings reach
// every rank's configuration, reported or refused there.
TEST(HorovodFlagsJob, HorovodVariablesReachEachRanksConfig) {
  auto r = runKolorun({"-np", "2", "-x", "HOROVOD_LOG_LEVEL=INFO", "-x",
                       "HOROVOD_NUM_NCCL_STREAMS=2", KOLO_MP_WORKER, "sum"},
                      std::chrono::seconds(60));
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  for (int rank : {0, 1}) {
    const std::string line = "[" + std::to_string(rank) + "]<stderr>:";
    bool found = false;
    for (const auto& l : splitLines(r.out + "\n" + r.err)) {
      found = found || (l.rfind(line, 0) == 0 &&
                        l.find("[kolo rank " + std::to_string(rank) +
                               "] [info] HOROVOD_NUM_NCCL_STREAMS=2 has no effect in kolo") !=
                            std::string::npos);
    }
    EXPECT_TRUE(found) << rank << "\n" << r.out << r.err;
  }

  auto bad = runKolorun({"-np", "2", "-x", "HOROVOD_CYCLE_TIME=fast", KOLO_MP_WORKER, "sum"},
                        std::chrono::seconds(60));
  EXPECT_NE(bad.exitCode, 0);
  EXPECT_NE((bad.out + bad.err).find("invalid value for HOROVOD_CYCLE_TIME: 'fast'"),
            std::string::npos)
      << bad.out << bad.err;
}

}  // namespace
}  // namespace testing
}  // namespace kolo::launcher
