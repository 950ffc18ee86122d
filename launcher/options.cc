#include "options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>

#include "check_build.h"
#include "config_file.h"
#include "horovod_flags.h"
#include "kolo/build_config.h"
#include "number_flags.h"
#include "usage_error.h"

namespace kolo::launcher {
namespace {

// horovodrun's single-dash spellings of long flags.
const std::pair<const char*, const char*> kSingleDash[] = {
    {"-np", "--num-proc"},
    {"-cb", "--check-build"},
    {"-hostfile", "--hostfile"},
    {"-prefix-timestamp", "--prefix-output-with-timestamp"},
};

// Flags whose values start with "-" themselves.
const char* const kJoinedValueFlags[] = {"--mpi-args", "--binding-args"};

}  // namespace

std::string formatNumber(double value) {
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 9e15) {
    return std::to_string(static_cast<long long>(value));
  }
  std::ostringstream out;
  out.precision(15);
  out << value;
  return out.str();
}

std::vector<std::string> normalizeArgs(const std::vector<std::string>& args,
                                       const std::vector<std::string>& valueFlags) {
  std::vector<std::string> out;
  bool inCommand = false;
  int expectValues = 0;
  bool joinNext = false;
  for (const auto& original : args) {
    if (inCommand) {
      out.push_back(original);
      continue;
    }
    if (expectValues > 0) {
      --expectValues;
      if (joinNext) {
        out.back() += "=" + original;
        joinNext = false;
      } else {
        out.push_back(original);
      }
      continue;
    }
    if (original == "--") {
      inCommand = true;
      out.push_back(original);
      continue;
    }
    if (original.size() < 2 || original[0] != '-') {
      inCommand = true;  // the program: everything from here is its own
      out.push_back(original);
      continue;
    }
    std::string arg = original;
    for (const auto& [single, long_] : kSingleDash) {
      const std::string prefix = std::string(single) + "=";
      if (arg == single) arg = long_;
      if (arg.rfind(prefix, 0) == 0) arg = long_ + arg.substr(prefix.size() - 1);
    }
    out.push_back(arg);
    bool inlineValue =
        arg.find('=') != std::string::npos || (arg.size() > 2 && arg[1] != '-');  // "-Hhost:2"
    if (inlineValue) continue;
    for (const auto& f : valueFlags) {
      if (f == arg) ++expectValues;  // listed once per value
    }
    for (const char* f : kJoinedValueFlags) {
      if (arg == f) joinNext = expectValues > 0;
    }
  }
  return out;
}

namespace {

constexpr const char* kFooter = R"(
Ranks fill the hosts in order. Ranks on this machine (localhost, 127.x, its
own name or address) are started directly; the others through ssh (or
--rsh CMD, run as: CMD HOST REMOTE-COMMAND) in the same working directory.
Every worker gets KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE,
KOLO_CROSS_RANK, KOLO_CROSS_SIZE, KOLO_HOSTNAME, KOLO_RENDEZVOUS_ADDR,
KOLO_RENDEZVOUS_PORT and KOLO_SECRET_KEY (a fresh random secret per job,
passed through the environment or the remote shell's standard input, never
on a command line). Local workers keep kolorun's environment; remote workers
get the KOLO_* variables and those named with -x. Every worker also gets
what torch.distributed's env:// reads, as torchrun sets it: RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR (rank 0's
host) and MASTER_PORT (a port free on kolorun's host at start; -x
MASTER_PORT=N picks another).

Output lines are prefixed "[RANK]<stdout>:" / "[RANK]<stderr>:".

Start timeout: a worker that is still running --start-timeout seconds after
the job started and has not reached rendezvous (kolo::init(), or its first
torch.distributed group on the "kolo" backend) stops the job, and kolorun
names it. A worker that finishes without calling kolo::init() is
fine; a long-running program that never calls it needs --start-timeout 0.

Failure: the first rank that exits non-zero or dies by a signal stops the
others (SIGTERM to each worker's process group, --grace-seconds, SIGKILL).
Ctrl-C or SIGTERM to kolorun stops the job the same way.

Exit status: 0 when every rank exited 0; the failed rank's exit code (128+N
for signal N); 128+N when kolorun got signal N; 124 when ranks did not reach
rendezvous in time; 2 for bad input or a rank that could not be started.)";

// A Horovod on/off pair: --NAME sets the switch, --no-NAME clears it.
void addSwitch(CLI::App& app, const std::string& on, const std::string& off,
               std::optional<bool>& target, const std::string& help, const std::string& group,
               const std::string& offHelp = "") {
  CLI::Option* a = app.add_flag_callback(
                          on, [&target] { target = true; }, help)
                       ->group(group);
  CLI::Option* b =
      app.add_flag_callback(
             off, [&target] { target = false; }, offHelp.empty() ? "turn " + on + " off" : offHelp)
          ->group(group);
  a->excludes(b);
}

// kolorun's flags, one function per --help group, in --help's order.

void addJobFlags(CLI::App& app, Options& o) {
  app.add_option("--num-proc", o.np, "-np N: number of ranks (default: all slots of -H/--hostfile)")
      ->transform(wholeFlag("-np", 1))->group("Job");
  app.add_option("-H,--hosts", o.hosts, "host:slots,... ranks per host (default localhost:N)")
      ->group("Job");
  app.add_option("--hostfile", o.hostfile,
                 "(or -hostfile) file of 'host slots=N' lines "
                 "('#' comments)")
      ->group("Job")
      ->excludes("--hosts");
  CLI::Option* glooFlag =
      app.add_flag("--gloo", o.gloo,
                   "use Gloo for control and CPU operations "
                   "(KOLO_CONTROLLER=gloo, KOLO_CPU_OPERATIONS=gloo; the default)")
          ->group("Job");
  CLI::Option* mpiFlag =
      app.add_flag("--mpi", o.mpi,
                   "run the job under mpirun with MPI for control and CPU "
                   "operations (KOLO_CONTROLLER=mpi, KOLO_CPU_OPERATIONS=mpi); --verbose prints "
                   "the mpirun command")
          ->group("Job")
          ->excludes("--gloo");
  app.add_flag("--jsrun", o.jsrun,
               "accepted for horovodrun's sake: kolorun starts the ranks "
               "itself, with a notice")
      ->group("Job")
      ->excludes(glooFlag)
      ->excludes(mpiFlag);
  app.add_flag(
         "--check-build", o.checkBuild,
         "(or -cb) print which frameworks, controllers and tensor operations this build of kolo "
         "has, and exit")
      ->group("Job");
  app.add_option("--config-file", o.configFile,
                 "Horovod's YAML file of settings (params, autotune, timeline, stall_check, "
                 "library_options, logging, controller); flags on the command line win")
      ->group("Job");
  app.add_flag("--disable-cache", o.disableCache,
               "accepted for horovodrun's sake: kolorun caches no start-up checks")
      ->group("Job");
}

void addElasticFlags(CLI::App& app, Options& o) {
  app.add_option("--min-np,--min-num-proc", o.minNp,
                 "elastic: fewest ranks to keep training with (default -np); below it for "
                 "--elastic-timeout the job ends")
      ->transform(wholeFlag("--min-np", 1))->group("Elastic");
  app.add_option("--max-np,--max-num-proc", o.maxNp,
                 "elastic: most ranks to grow to when hosts appear (default -np)")
      ->transform(wholeFlag("--max-np", 1))->group("Elastic");
  app.add_option("--host-discovery-script", o.hostDiscoveryScript,
                 "elastic: shell command printing the available hosts, one 'host:slots' (or "
                 "'host') per line; run every --discovery-interval seconds")
      ->group("Elastic")->excludes("--hosts")->excludes("--hostfile");
  app.add_option("--slots,--slots-per-host", o.slotsPerHost,
                 "elastic: slots of a discovered host printed without ':slots' (default 1)")
      ->transform(wholeFlag("--slots", 1))->group("Elastic");
  app.add_option("--elastic-timeout", o.elasticTimeoutSeconds,
                 "elastic: seconds to wait for --min-np workers (at the start, or after losing "
                 "workers) before the job ends (default: HOROVOD_ELASTIC_TIMEOUT, else 600)")
      ->check(numberFlag("--elastic-timeout", Floor::kPositive))
      ->group("Elastic");
  app.add_option("--reset-limit", o.resetLimit,
                 "elastic: end the job after this many re-formed worlds (default: no limit)")
      ->transform(wholeFlag("--reset-limit", 0))->group("Elastic");
  app.add_option("--blacklist-cooldown-range", o.blacklistCooldownRange,
                 "elastic: MIN MAX seconds; a host whose worker failed takes no new workers "
                 "for MIN*2^(failures-1) seconds, at most MAX (default: never again)")
      ->check(numberFlag("--blacklist-cooldown-range"))
      ->expected(2)->allow_extra_args(false)->group("Elastic");
  app.add_option("--discovery-interval", o.discoveryIntervalSeconds,
                 "elastic: seconds between runs of --host-discovery-script (default 1)")
      ->check(numberFlag("--discovery-interval", Floor::kPositive))->group("Elastic");
}

void addRendezvousFlags(CLI::App& app, Options& o, HorovodSpellings& h) {
  app.add_option("--network-interface", h.networkInterface,
                 "interface whose IPv4 address workers use to reach kolorun's store; also "
                 "KOLO_IFACE for the data plane (repeatable: each host uses the first it has)")
      ->allow_extra_args(false)
      ->group("Rendezvous");
  app.add_option("--network-interfaces", h.networkInterfaces,
                 "NIC[,NIC...]: interfaces for the job; each host uses the first it has for the "
                 "store and data plane (KOLO_IFACE), all go to NCCL (NCCL_SOCKET_IFNAME) and "
                 "with --mpi to MPI's TCP transport")
      ->allow_extra_args(false)
      ->group("Rendezvous");
  app.add_option("--port", o.port, "TCP port of the rendezvous store (default: a free port)")
      ->transform(wholeFlag("--port", 1, 65535))->group("Rendezvous");
  app.add_option("--start-timeout", o.startTimeoutSeconds,
                 "seconds a running worker may take to reach rendezvous; 0 = no limit "
                 "(default: HOROVOD_START_TIMEOUT, else 30)")
      ->check(numberFlag("--start-timeout", Floor::kZero))
      ->group("Rendezvous");
  app.add_option("--grace-seconds", o.graceSeconds,
                 "seconds between SIGTERM and SIGKILL when stopping workers (default 5)")
      ->check(numberFlag("--grace-seconds", Floor::kZero))->group("Rendezvous");
  app.add_option("-x,--env", o.exportEnv,
                 "NAME or NAME=VALUE: set/forward this variable to every worker (repeatable)")
      ->allow_extra_args(false)->group("Rendezvous");
}

void addRemoteFlags(CLI::App& app, Options& o) {
  app.add_option("--rsh", o.rsh, "remote shell command instead of ssh, run as "
                 "'CMD HOST REMOTE-COMMAND' (environment arrives on its stdin)")->group("Remote");
  app.add_option("-p,--ssh-port", o.sshPort, "ssh port for remote hosts")
      ->transform(wholeFlag("-p/--ssh-port", 1, 65535))->group("Remote");
  app.add_option("-i,--ssh-identity-file", o.sshIdentity, "ssh identity (private key) file")
      ->group("Remote");
}

void addOutputFlags(CLI::App& app, Options& o) {
  app.add_option("--output-filename", o.outputDir,
                 "also write each rank's output to DIR/rank.N/{stdout,stderr}")->group("Output");
  app.add_flag("--prefix-timestamp,--prefix-output-with-timestamp", o.prefixTimestamp,
               "(or -prefix-timestamp) start each output line with the time")
      ->group("Output");
  app.add_flag("--verbose", o.verbose, "print the rank placement and rendezvous address")
      ->group("Output");
}

void addTuningFlags(CLI::App& app, Options& o, HorovodSpellings& h) {
  const std::string tuning = "Tuning";
  app.add_option("--fusion-threshold-mb", o.fusionThresholdMb,
                 "fusion buffer size in MiB (KOLO_FUSION_THRESHOLD, bytes)")
      ->check(numberFlag("--fusion-threshold-mb"))->group(tuning);
  app.add_option("--cycle-time-ms", o.cycleTimeMs, "coordination cycle in ms (KOLO_CYCLE_TIME)")
      ->check(numberFlag("--cycle-time-ms"))->group(tuning);
  app.add_option("--cache-capacity", o.cacheCapacity,
                 "response cache entries, 0 = off (KOLO_CACHE_CAPACITY)")
      ->transform(wholeFlag("--cache-capacity"))->group(tuning);
  addSwitch(app, "--hierarchical-allreduce", "--no-hierarchical-allreduce", o.hierarchicalAllreduce,
            "allreduce across hosts in two levels: shared memory in each host, then across "
            "hosts (KOLO_HIERARCHICAL_ALLREDUCE=1)",
            tuning, "flat allreduce, also under --autotune (KOLO_HIERARCHICAL_ALLREDUCE=0)");
  addSwitch(app, "--hierarchical-allgather", "--no-hierarchical-allgather", o.hierarchicalAllgather,
            "the same two levels for allgather and broadcast (KOLO_HIERARCHICAL_ALLGATHER=1)",
            tuning, "flat allgather (KOLO_HIERARCHICAL_ALLGATHER=0)");
  addSwitch(app, "--torus-allreduce", "--no-torus-allreduce", o.torusAllreduce,
            "accepted for horovodrun's sake (no NCCL torus in kolo), with a notice", tuning,
            "accepted for horovodrun's sake, with a notice");
  app.add_option("--timeline-filename", o.timelineFilename,
                 "write a Chrome-trace timeline to this file (KOLO_TIMELINE)")
      ->group(tuning);
  addSwitch(app, "--timeline-mark-cycles", "--no-timeline-mark-cycles", o.timelineMarkCycles,
            "mark coordination cycles on the timeline (KOLO_TIMELINE_MARK_CYCLES=1)", tuning);
  addSwitch(app, "--autotune", "--no-autotune", o.autotune,
            "tune fusion and cycle time online (KOLO_AUTOTUNE=1)", tuning);
  app.add_option("--autotune-log-file", o.autotuneLogFile,
                 "log autotuning samples to this file (KOLO_AUTOTUNE_LOG)")
      ->group(tuning);
  app.add_option("--autotune-warmup-samples", o.autotuneWarmupSamples,
                 "samples discarded after each change (KOLO_AUTOTUNE_WARMUP_SAMPLES)")
      ->transform(wholeFlag("--autotune-warmup-samples"))->group(tuning);
  app.add_option("--autotune-steps-per-sample", o.autotuneStepsPerSample,
                 "accepted for horovodrun's sake, with a notice")
      ->transform(wholeFlag("--autotune-steps-per-sample"))->group(tuning);
  app.add_option("--autotune-bayes-opt-max-samples", o.autotuneBayesOptMaxSamples,
                 "accepted for horovodrun's sake, with a notice")
      ->transform(wholeFlag("--autotune-bayes-opt-max-samples"))->group(tuning);
  app.add_option("--autotune-gaussian-process-noise", o.autotuneGaussianProcessNoise,
                 "accepted for horovodrun's sake (in [0, 1]), with a notice")
      ->check(numberFlag("--autotune-gaussian-process-noise"))->group(tuning);
  app.add_option("--log-level", h.logLevel,
                 "worker log level (KOLO_LOG_LEVEL): "
                 "trace|debug|info|warning|error|off or Horovod's TRACE|...|FATAL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warning", "error", "off", "TRACE", "DEBUG",
                             "INFO", "WARNING", "ERROR", "FATAL"}))
      ->group(tuning);
  addSwitch(app, "--log-with-timestamp", "--log-without-timestamp", o.logWithTimestamp,
            "worker log lines start with the time (the default; KOLO_LOG_HIDE_TIME=0)", tuning,
            "worker log lines without the time (KOLO_LOG_HIDE_TIME=1)");
  addSwitch(app, "--log-hide-timestamp", "--no-log-hide-timestamp", h.logHideTimestamp,
            "Horovod's old name of --log-without-timestamp", tuning,
            "Horovod's old name of --log-with-timestamp");
  addSwitch(app, "--no-stall-check", "--stall-check", o.noStallCheck,
            "no stall warning and no stall shutdown (KOLO_STALL_CHECK_TIME=0, "
            "KOLO_STALL_SHUTDOWN_TIME=0)",
            tuning, "keep the stall check on (the default)");
  app.add_option("--stall-check-warning-time-seconds", o.stallCheckWarningSeconds,
                 "warn when ranks stall this long, 0 = off (KOLO_STALL_CHECK_TIME)")
      ->check(numberFlag("--stall-check-warning-time-seconds"))->group(tuning);
  app.add_option("--stall-check-shutdown-time-seconds", o.stallCheckShutdownSeconds,
                 "fail the job after a stall this long, 0 = off; as in Horovod, only when "
                 "longer than the warning time (KOLO_STALL_SHUTDOWN_TIME)")
      ->check(numberFlag("--stall-check-shutdown-time-seconds"))->group(tuning);
  app.add_option("--timeout-seconds", o.timeoutSeconds,
                 "declare a silent peer failed after this long (KOLO_TIMEOUT)")
      ->check(numberFlag("--timeout-seconds"))->group(tuning);
  app.add_option("--gloo-timeout-seconds", o.glooTimeoutSeconds,
                 "Horovod's bound on Gloo operations: KOLO_TIMEOUT, which bounds every wait "
                 "(--timeout-seconds wins)")
      ->check(numberFlag("--gloo-timeout-seconds"))->group(tuning);
}

void addLibraryFlags(CLI::App& app, Options& o) {
  const std::string library = "Library";
  addSwitch(app, "--mpi-threads-disable", "--no-mpi-threads-disable", o.mpiThreadsDisable,
            "accepted for horovodrun's sake (kolo needs MPI_THREAD_SERIALIZED), with a notice",
            library, "accepted for horovodrun's sake, with a notice");
  app.add_option("--mpi-args", o.mpiArgs,
                 "with --mpi: extra mpirun arguments, e.g. --mpi-args=\"--map-by ppr:2:node\"")
      ->group(library);
  app.add_option("--binding-args", o.bindingArgs,
                 "with --mpi: mpirun's binding arguments instead of '--bind-to none'")
      ->group(library);
  app.add_flag("--tcp", o.tcp, "TCP only: NCCL_IB_DISABLE=1 for every worker")->group(library);
  app.add_option("--num-nccl-streams", o.numNcclStreams,
                 "accepted for horovodrun's sake (one stream per GPU in kolo), with a notice")
      ->transform(wholeFlag("--num-nccl-streams"))->group(library);
  app.add_option("--thread-affinity", o.threadAffinity,
                 "accepted for horovodrun's sake (kolo does not pin threads), with a notice")
      ->transform(wholeFlag("--thread-affinity"))->group(library);
}

// Binds every flag to `o`, or to `h` for those horovodrun spells its own
// way; both must outlive app.parse().
void defineFlags(CLI::App& app, Options& o, HorovodSpellings& h) {
  app.prefix_command();
  app.footer(kFooter);
  app.get_formatter()->column_width(42);
  app.set_version_flag("-v,--version", "kolorun (kolo) " KOLO_VERSION);  // VERSION
  addJobFlags(app, o);
  addElasticFlags(app, o);
  addRendezvousFlags(app, o, h);
  addRemoteFlags(app, o);
  addOutputFlags(app, o);
  addTuningFlags(app, o, h);
  addLibraryFlags(app, o);
}

// Parses argv into the flags' targets. Returns the exit code of a run that
// is already over (--help, --version), nullopt to go on. Throws UsageError
// for what CLI11 rejects.
std::optional<int> readFlags(CLI::App& app, int argc, const char* const* argv) {
  std::vector<std::string> valueFlags;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_min() == 0) continue;  // a flag
    for (int k = 0; k < opt->get_expected_min(); ++k) {
      for (const auto& s : opt->get_snames()) valueFlags.push_back("-" + s);
      for (const auto& l : opt->get_lnames()) valueFlags.push_back("--" + l);
    }
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  args = normalizeArgs(args, valueFlags);
  std::reverse(args.begin(), args.end());  // CLI11 takes a reversed vector

  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::CallForVersion&) {
    std::printf("kolorun (kolo) %s\n", KOLO_VERSION);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    throw UsageError(msg + "; see kolorun --help");
  }
  return std::nullopt;
}

// The program and its arguments: what follows kolorun's flags (and "--").
void takeProgram(const CLI::App& app, Options& o) {
  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") {
    o.command.erase(o.command.begin());
  } else if (!o.command.empty() && o.command.front().size() > 1 && o.command.front()[0] == '-') {
    throw UsageError("unknown option '" + o.command.front() +
                     "'; see kolorun --help (put '--' before a program whose name starts with '-')");
  }
}

void checkPositive(const std::optional<double>& v, const char* flag, bool allowZero) {
  if (v && (!std::isfinite(*v) || *v < 0 || (!allowZero && *v == 0))) {
    throw UsageError(std::string(flag) + " must be " + (allowZero ? "zero or more" : "positive") +
                     ", got " + formatNumber(*v));
  }
}

void checkRange(const std::optional<double>& v, const char* flag, double min, double max,
                const char* accepted) {
  if (v && (!std::isfinite(*v) || *v < min || *v > max)) {
    throw UsageError(std::string(flag) + " must be " + accepted + ", got " + formatNumber(*v));
  }
}

void checkRange(const std::optional<int>& v, const char* flag, const char* accepted) {
  if (v && *v < 0) {
    throw UsageError(std::string(flag) + " must be " + accepted + ", got " + std::to_string(*v));
  }
}

void checkElastic(Options& o) {
  if (o.mpi) {
    throw UsageError("elastic jobs (--host-discovery-script, --min-np, --max-np) run over Gloo; "
                     "drop --mpi");
  }
  if (o.hostDiscoveryScript.empty() && o.hosts.empty() && o.hostfile.empty()) {
    throw UsageError("--min-np/--max-np need hosts: give --host-discovery-script, -H or --hostfile");
  }
  if (o.np == 0) o.np = o.minNp;
  if (o.np == 0) {
    throw UsageError("an elastic job needs -np N (the ranks to start with); --min-np and "
                     "--max-np default to it");
  }
  if (o.minNp == 0) o.minNp = o.np;
  if (o.maxNp == 0) o.maxNp = std::max(o.np, o.minNp);
  if (o.minNp > o.np || o.np > o.maxNp) {
    throw UsageError("elastic sizes must satisfy --min-np <= -np <= --max-np, got " +
                     std::to_string(o.minNp) + " <= " + std::to_string(o.np) + " <= " +
                     std::to_string(o.maxNp));
  }
  const auto& range = o.blacklistCooldownRange;
  if (!range.empty() && (range.size() != 2 || !(range[0] > 0) || !(range[1] >= range[0]) ||
                         !std::isfinite(range[1]))) {
    throw UsageError("--blacklist-cooldown-range takes MIN MAX seconds with 0 < MIN <= MAX");
  }
}

// The checks CLI11 does not make, in the order users meet their errors;
// fills in the elastic sizes left to default.
void validate(Options& o) {
  if (o.mpi && !KOLO_WITH_MPI) {
    throw UsageError("kolorun --mpi is not available in this build yet: kolo was built "
                     "without MPI; rebuild it with libopenmpi-dev installed or use --gloo "
                     "(the default)");
  }
  if (o.command.empty()) {
    throw UsageError("no program given; usage: kolorun -np N PROGRAM [ARGS...]");
  }
  if (o.elastic()) checkElastic(o);
  if (o.np == 0 && o.hosts.empty() && o.hostfile.empty()) {
    throw UsageError("give the number of ranks with -np N (or hosts with -H/--hostfile)");
  }
  checkPositive(o.fusionThresholdMb, "--fusion-threshold-mb", true);
  checkPositive(o.cycleTimeMs, "--cycle-time-ms", true);
  checkPositive(o.stallCheckWarningSeconds, "--stall-check-warning-time-seconds", true);
  checkPositive(o.stallCheckShutdownSeconds, "--stall-check-shutdown-time-seconds", true);
  checkPositive(o.timeoutSeconds, "--timeout-seconds", false);
  checkPositive(o.glooTimeoutSeconds, "--gloo-timeout-seconds", false);
  checkRange(o.autotuneGaussianProcessNoise, "--autotune-gaussian-process-noise", 0.0, 1.0,
             "in [0, 1]");
  checkRange(o.cacheCapacity, "--cache-capacity", "zero or more");
  checkRange(o.autotuneWarmupSamples, "--autotune-warmup-samples", "zero or more");
  checkRange(o.autotuneStepsPerSample, "--autotune-steps-per-sample", "zero or more");
  checkRange(o.autotuneBayesOptMaxSamples, "--autotune-bayes-opt-max-samples", "zero or more");
  checkRange(o.numNcclStreams, "--num-nccl-streams", "zero or more");
  checkRange(o.threadAffinity, "--thread-affinity", "zero or more");
  if (o.autotuneWarmupSamples && *o.autotuneWarmupSamples > 1000) {
    throw UsageError("--autotune-warmup-samples must be at most 1000, got " +
                     std::to_string(*o.autotuneWarmupSamples));
  }
  for (const auto& e : o.exportEnv) {
    std::string name = e.substr(0, e.find('='));
    bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
    for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ok) throw UsageError("-x '" + e + "': expected NAME or NAME=VALUE");
  }
}

}  // namespace

ParsedCommandLine parseCommandLine(int argc, const char* const* argv, const EnvLookup& env) {
  Options o;
  o.startTimeoutSeconds = secondsFromEnv(env, "HOROVOD_START_TIMEOUT", 30);
  o.elasticTimeoutSeconds = secondsFromEnv(env, "HOROVOD_ELASTIC_TIMEOUT", 600);
  CLI::App app{"kolorun: start a kolo job of N ranks on one or more hosts.\n  kolorun [OPTIONS] -np N PROGRAM [ARGS...]", "kolorun"};
  HorovodSpellings spellings;
  defineFlags(app, o, spellings);
  if (auto exitCode = readFlags(app, argc, argv)) return {std::nullopt, *exitCode};
  o.startTimeoutGiven = app.get_option("--start-timeout")->count() > 0;
  applyHorovodSpellings(spellings, o);

  // Horovod's YAML settings, for whatever the command line left unset.
  if (!o.configFile.empty()) {
    auto given = [&app](const std::string& flag) {
      const CLI::Option* opt = app.get_option_no_throw(flag);
      return opt != nullptr && opt->count() > 0;
    };
    applyConfigFile(o.configFile, o, given);
  }

  if (o.checkBuild) {
    std::printf("%s", checkBuildReport(o.verbose).c_str());
    return {std::nullopt, 0};
  }

  takeProgram(app, o);
  validate(o);
  addHorovodNotices(o);
  return {o, 0};
}

}  // namespace kolo::launcher