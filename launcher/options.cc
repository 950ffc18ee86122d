#include "options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>

#include "kolo/build_config.h"
#include "usage_error.h"

namespace kolo::launcher {
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
get the KOLO_* variables and those named with -x.

Output lines are prefixed "[RANK]<stdout>:" / "[RANK]<stderr>:".

Start timeout: a worker that is still running --start-timeout seconds after
the job started and has not reached rendezvous (kolo::init()) stops the job,
and kolorun names it. A worker that finishes without calling kolo::init() is
fine; a long-running program that never calls it needs --start-timeout 0.

Failure: the first rank that exits non-zero or dies by a signal stops the
others (SIGTERM to each worker's process group, --grace-seconds, SIGKILL).
Ctrl-C or SIGTERM to kolorun stops the job the same way.

Exit status: 0 when every rank exited 0; the failed rank's exit code (128+N
for signal N); 128+N when kolorun got signal N; 124 when ranks did not reach
rendezvous in time; 2 for bad input or a rank that could not be started.)";

void checkPositive(const std::optional<double>& v, const char* flag, bool allowZero) {
  if (v && (!std::isfinite(*v) || *v < 0 || (!allowZero && *v == 0))) {
    throw UsageError(std::string(flag) + " must be " + (allowZero ? "zero or more" : "positive") +
                     ", got " + formatNumber(*v));
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
  for (const auto& arg : args) {
    if (inCommand) {
      out.push_back(arg);
    } else if (expectValues > 0) {
      --expectValues;
      out.push_back(arg);
    } else if (arg == "--") {
      inCommand = true;
      out.push_back(arg);
    } else if (arg == "-np") {
      out.push_back("--num-proc");
      expectValues = 1;
    } else if (arg.rfind("-np=", 0) == 0) {
      out.push_back("--num-proc=" + arg.substr(4));
    } else if (arg.size() > 1 && arg[0] == '-') {
      out.push_back(arg);
      bool inlineValue = arg.find('=') != std::string::npos ||
                         (arg.size() > 2 && arg[1] != '-');  // "-Hhost:2"
      for (const auto& f : valueFlags) {
        if (f == arg && !inlineValue) ++expectValues;  // listed once per value
      }
    } else {
      inCommand = true;  // the program: everything from here is its own
      out.push_back(arg);
    }
  }
  return out;
}

ParsedCommandLine parseCommandLine(int argc, const char* const* argv) {
  Options o;
  CLI::App app{"kolorun: start a kolo job of N ranks on one or more hosts.\n  kolorun [OPTIONS] -np N PROGRAM [ARGS...]", "kolorun"};
  app.prefix_command();
  app.footer(kFooter);
  app.get_formatter()->column_width(42);
  app.set_version_flag("--version", "kolorun (kolo) " KOLO_VERSION);  // VERSION

  // Job shape.
  app.add_option("--num-proc", o.np, "-np N: number of ranks (default: all slots of -H/--hostfile)")
      ->check(CLI::PositiveNumber)->group("Job");
  app.add_option("-H,--hosts", o.hosts, "host:slots,... ranks per host (default localhost:N)")
      ->group("Job");
  app.add_option("--hostfile", o.hostfile, "file of 'host slots=N' lines ('#' comments)")
      ->group("Job")->excludes("--hosts");
  app.add_flag("--gloo", o.gloo, "use Gloo for control and CPU operations "
               "(KOLO_CONTROLLER=gloo, KOLO_CPU_OPERATIONS=gloo; the default)")->group("Job");
  app.add_flag("--mpi", o.mpi, "run the job under mpirun with MPI for control and CPU "
               "operations (KOLO_CONTROLLER=mpi, KOLO_CPU_OPERATIONS=mpi); --verbose prints "
               "the mpirun command")
      ->group("Job")->excludes("--gloo");

  // Elastic.
  app.add_option("--min-np,--min-num-proc", o.minNp,
                 "elastic: fewest ranks to keep training with (default -np); below it for "
                 "--elastic-timeout the job ends")->check(CLI::PositiveNumber)->group("Elastic");
  app.add_option("--max-np,--max-num-proc", o.maxNp,
                 "elastic: most ranks to grow to when hosts appear (default -np)")
      ->check(CLI::PositiveNumber)->group("Elastic");
  app.add_option("--host-discovery-script", o.hostDiscoveryScript,
                 "elastic: shell command printing the available hosts, one 'host:slots' (or "
                 "'host') per line; run every --discovery-interval seconds")
      ->group("Elastic")->excludes("--hosts")->excludes("--hostfile");
  app.add_option("--slots,--slots-per-host", o.slotsPerHost,
                 "elastic: slots of a discovered host printed without ':slots' (default 1)")
      ->check(CLI::PositiveNumber)->group("Elastic");
  app.add_option("--elastic-timeout", o.elasticTimeoutSeconds,
                 "elastic: seconds to wait for --min-np workers (at the start, or after losing "
                 "workers) before the job ends (default 600)")
      ->check(CLI::PositiveNumber)->group("Elastic");
  app.add_option("--reset-limit", o.resetLimit,
                 "elastic: end the job after this many re-formed worlds (default: no limit)")
      ->check(CLI::NonNegativeNumber)->group("Elastic");
  app.add_option("--blacklist-cooldown-range", o.blacklistCooldownRange,
                 "elastic: MIN MAX seconds; a host whose worker failed takes no new workers "
                 "for MIN*2^(failures-1) seconds, at most MAX (default: never again)")
      ->expected(2)->allow_extra_args(false)->group("Elastic");
  app.add_option("--discovery-interval", o.discoveryIntervalSeconds,
                 "elastic: seconds between runs of --host-discovery-script (default 1)")
      ->check(CLI::PositiveNumber)->group("Elastic");

  // Rendezvous and processes.
  app.add_option("--network-interface", o.networkInterface,
                 "interface whose IPv4 address workers use to reach kolorun's rendezvous "
                 "store; also sets KOLO_IFACE for the data plane")->group("Rendezvous");
  app.add_option("--port", o.port, "TCP port of the rendezvous store (default: a free port)")
      ->check(CLI::Range(1, 65535))->group("Rendezvous");
  app.add_option("--start-timeout", o.startTimeoutSeconds,
                 "seconds a running worker may take to reach rendezvous; 0 = no limit "
                 "(default 30)")->check(CLI::NonNegativeNumber)->group("Rendezvous");
  app.add_option("--grace-seconds", o.graceSeconds,
                 "seconds between SIGTERM and SIGKILL when stopping workers (default 5)")
      ->check(CLI::NonNegativeNumber)->group("Rendezvous");
  app.add_option("-x,--env", o.exportEnv,
                 "NAME or NAME=VALUE: set/forward this variable to every worker (repeatable)")
      ->allow_extra_args(false)->group("Rendezvous");

  // Remote start.
  app.add_option("--rsh", o.rsh, "remote shell command instead of ssh, run as "
                 "'CMD HOST REMOTE-COMMAND' (environment arrives on its stdin)")->group("Remote");
  app.add_option("-p,--ssh-port", o.sshPort, "ssh port for remote hosts")
      ->check(CLI::Range(1, 65535))->group("Remote");
  app.add_option("-i,--ssh-identity-file", o.sshIdentity, "ssh identity (private key) file")
      ->group("Remote");

  // Output.
  app.add_option("--output-filename", o.outputDir,
                 "also write each rank's output to DIR/rank.N/{stdout,stderr}")->group("Output");
  app.add_flag("--prefix-timestamp", o.prefixTimestamp, "start each output line with the time")
      ->group("Output");
  app.add_flag("--verbose", o.verbose, "print the rank placement and rendezvous address")
      ->group("Output");

  // Tuning.
  app.add_option("--fusion-threshold-mb", o.fusionThresholdMb,
                 "fusion buffer size in MiB (KOLO_FUSION_THRESHOLD, bytes)")->group("Tuning");
  app.add_option("--cycle-time-ms", o.cycleTimeMs, "coordination cycle in ms (KOLO_CYCLE_TIME)")
      ->group("Tuning");
  app.add_option("--cache-capacity", o.cacheCapacity,
                 "response cache entries, 0 = off (KOLO_CACHE_CAPACITY)")
      ->check(CLI::NonNegativeNumber)->group("Tuning");
  app.add_option("--timeline-filename", o.timelineFilename,
                 "write a Chrome-trace timeline to this file (KOLO_TIMELINE)")->group("Tuning");
  app.add_flag("--autotune", o.autotune, "tune fusion and cycle time online (KOLO_AUTOTUNE=1)")
      ->group("Tuning");
  app.add_option("--autotune-log-file", o.autotuneLogFile,
                 "log autotuning samples to this file (KOLO_AUTOTUNE_LOG)")->group("Tuning");
  app.add_option("--log-level", o.logLevel, "worker log level (KOLO_LOG_LEVEL)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warning", "error", "off"}))
      ->group("Tuning");
  app.add_option("--stall-check-warning-time-seconds", o.stallCheckWarningSeconds,
                 "warn when ranks stall this long, 0 = off (KOLO_STALL_CHECK_TIME)")
      ->group("Tuning");
  app.add_option("--stall-check-shutdown-time-seconds", o.stallCheckShutdownSeconds,
                 "fail the job after a stall this long, 0 = off (KOLO_STALL_SHUTDOWN_TIME)")
      ->group("Tuning");
  app.add_option("--timeout-seconds", o.timeoutSeconds,
                 "declare a silent peer failed after this long (KOLO_TIMEOUT)")->group("Tuning");

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
    return {std::nullopt, 0};
  } catch (const CLI::CallForVersion&) {
    std::printf("kolorun (kolo) 0.1.0\n");
    return {std::nullopt, 0};
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    throw UsageError(msg + "; see kolorun --help");
  }

  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") {
    o.command.erase(o.command.begin());
  } else if (!o.command.empty() && o.command.front().size() > 1 && o.command.front()[0] == '-') {
    throw UsageError("unknown option '" + o.command.front() +
                     "'; see kolorun --help (put '--' before a program whose name starts with '-')");
  }
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
  for (const auto& e : o.exportEnv) {
    std::string name = e.substr(0, e.find('='));
    bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
    for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ok) throw UsageError("-x '" + e + "': expected NAME or NAME=VALUE");
  }
  return {o, 0};
}

EnvList tuningEnv(const Options& o) {
  EnvList env;
  if (o.fusionThresholdMb) {
    env.emplace_back("KOLO_FUSION_THRESHOLD",
                     formatNumber(std::floor(*o.fusionThresholdMb * 1024.0 * 1024.0)));
  }
  if (o.cycleTimeMs) env.emplace_back("KOLO_CYCLE_TIME", formatNumber(*o.cycleTimeMs));
  if (o.cacheCapacity) env.emplace_back("KOLO_CACHE_CAPACITY", std::to_string(*o.cacheCapacity));
  if (!o.timelineFilename.empty()) env.emplace_back("KOLO_TIMELINE", o.timelineFilename);
  if (o.autotune) env.emplace_back("KOLO_AUTOTUNE", "1");
  if (!o.autotuneLogFile.empty()) env.emplace_back("KOLO_AUTOTUNE_LOG", o.autotuneLogFile);
  if (!o.logLevel.empty()) env.emplace_back("KOLO_LOG_LEVEL", o.logLevel);
  if (o.stallCheckWarningSeconds) {
    env.emplace_back("KOLO_STALL_CHECK_TIME", formatNumber(*o.stallCheckWarningSeconds));
  }
  if (o.stallCheckShutdownSeconds) {
    env.emplace_back("KOLO_STALL_SHUTDOWN_TIME", formatNumber(*o.stallCheckShutdownSeconds));
  }
  if (o.timeoutSeconds) env.emplace_back("KOLO_TIMEOUT", formatNumber(*o.timeoutSeconds));
  if (!o.networkInterface.empty()) env.emplace_back("KOLO_IFACE", o.networkInterface);
  if (o.gloo) {
    env.emplace_back("KOLO_CONTROLLER", "gloo");
    env.emplace_back("KOLO_CPU_OPERATIONS", "gloo");
  }
  if (o.mpi) {
    env.emplace_back("KOLO_CONTROLLER", "mpi");
    env.emplace_back("KOLO_CPU_OPERATIONS", "mpi");
  }
  return env;
}

}  // namespace kolo::launcher
