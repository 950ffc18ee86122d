// kolorun's command line: flags (CLI11) into one Options value, and the
// tuning flags mapped to the KOLO_* variables workers read. kolorun takes
// every flag of horovodrun 0.28.1: each either does what it does in Horovod
// or is accepted with a notice (Options::notices) saying what kolo does
// instead (horovod_flags.h; docs/migrating/horovodrun-flags.md).
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kolo/config.h"

namespace kolo::launcher {

struct Options {
  // Job shape.
  int np = 0;  // 0: not given
  std::string hosts;     // -H
  std::string hostfile;  // --hostfile
  std::vector<std::string> command;  // program and its arguments

  // Rendezvous and processes.
  std::string networkInterface;                // networkInterfaces joined by commas (KOLO_IFACE)
  std::vector<std::string> networkInterfaces;  // --network-interface(s), in order
  int port = 0;  // 0: any free port
  double startTimeoutSeconds = 30;  // --start-timeout, else HOROVOD_START_TIMEOUT
  bool startTimeoutGiven = false;   // on the command line
  double graceSeconds = 5;
  std::vector<std::string> exportEnv;  // -x NAME or NAME=VALUE

  // Remote start.
  std::string rsh;  // empty: ssh
  int sshPort = 0;
  std::string sshIdentity;

  // Output.
  std::string outputDir;
  bool prefixTimestamp = false;
  bool verbose = false;

  // Backend and tuning (unset: the worker's own environment or kolo's default).
  // Horovod's on/off switches (--x / --no-x, or --config-file) are
  // optional: unset leaves the worker's own environment or kolo's default.
  bool gloo = false;
  bool mpi = false;
  bool jsrun = false;  // accepted; kolo starts the ranks itself
  std::optional<double> fusionThresholdMb;
  std::optional<double> cycleTimeMs;
  std::optional<int> cacheCapacity;
  std::optional<bool> hierarchicalAllreduce;
  std::optional<bool> hierarchicalAllgather;
  std::optional<bool> torusAllreduce;  // accepted, no kolo meaning
  std::string timelineFilename;
  std::optional<bool> timelineMarkCycles;
  std::optional<bool> autotune;
  std::string autotuneLogFile;
  std::optional<int> autotuneWarmupSamples;
  std::optional<int> autotuneStepsPerSample;           // accepted, no kolo meaning
  std::optional<int> autotuneBayesOptMaxSamples;       // accepted, no kolo meaning
  std::optional<double> autotuneGaussianProcessNoise;  // accepted, no kolo meaning
  std::string logLevel;  // kolo's level name (Horovod's upper-case names are mapped)
  std::optional<bool> logWithTimestamp;
  std::optional<bool> noStallCheck;
  std::optional<double> stallCheckWarningSeconds;
  std::optional<double> stallCheckShutdownSeconds;
  std::optional<double> timeoutSeconds;
  std::optional<double> glooTimeoutSeconds;  // KOLO_TIMEOUT unless --timeout-seconds

  // Horovod's library options.
  std::optional<bool> mpiThreadsDisable;  // accepted, no kolo meaning
  std::string mpiArgs;                    // extra mpirun arguments (--mpi)
  std::string bindingArgs;                // mpirun binding arguments (--mpi)
  bool tcp = false;                       // NCCL_IB_DISABLE=1
  std::optional<int> numNcclStreams;      // accepted, no kolo meaning
  std::optional<int> threadAffinity;      // accepted, no kolo meaning

  // Horovod's run-time checks and configuration.
  bool checkBuild = false;    // print what this build has and exit
  bool disableCache = false;  // accepted: kolorun caches nothing
  std::string configFile;     // Horovod's YAML; command-line flags win

  // One line each, for kolorun to print on stderr before it starts the job:
  // flags accepted for Horovod's sake that kolo follows differently.
  std::vector<std::string> notices;

  // Elastic (Horovod Elastic's flags). --host-discovery-script, --min-np or
  // --max-np turns kolorun into the elastic driver (launcher/elastic_job.h).
  int minNp = 0;  // 0: not given (= -np)
  int maxNp = 0;  // 0: not given (= -np)
  std::string hostDiscoveryScript;  // a shell command printing host[:slots] lines
  int slotsPerHost = 0;             // --slots: slots of discovered hosts without ":N" (0 = 1)
  double elasticTimeoutSeconds = 600;
  std::optional<int> resetLimit;                // unset: no limit
  std::vector<double> blacklistCooldownRange;   // {min, max} seconds; empty: for good
  double discoveryIntervalSeconds = 1;          // kolo's own: how often the script runs

  bool elastic() const { return !hostDiscoveryScript.empty() || minNp > 0 || maxNp > 0; }
};

// Either options to run with, or the exit code of a run that is already
// over (--help, --version). Throws UsageError for bad flags.
struct ParsedCommandLine {
  std::optional<Options> options;
  int exitCode = 0;
};
// env: where HOROVOD_START_TIMEOUT and HOROVOD_ELASTIC_TIMEOUT (the
// defaults of --start-timeout and --elastic-timeout, as in horovodrun) are
// read.
ParsedCommandLine parseCommandLine(int argc, const char* const* argv,
                                   const EnvLookup& env = processEnv());

// Horovod spells some flags with one dash ("-np", "-cb", "-hostfile",
// "-prefix-timestamp"); CLI11 wants one letter after a single dash. Rewrites
// them to their long names in kolorun's own flags only, never in the
// program's arguments, and joins --mpi-args / --binding-args with their
// value ("--mpi-args=--map-by x"): theirs start with "-" themselves. valueFlags: flags that take
// separate values, each listed once per value it takes.
std::vector<std::string> normalizeArgs(const std::vector<std::string>& args,
                                       const std::vector<std::string>& valueFlags);

// Shortest decimal text for a number ("5", "0.25").
std::string formatNumber(double value);

}  // namespace kolo::launcher
