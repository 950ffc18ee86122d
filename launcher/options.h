// kolorun's command line: flags (CLI11) into one Options value, and the
// tuning flags mapped to the KOLO_* variables workers read.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kolo::launcher {

struct Options {
  // Job shape.
  int np = 0;  // 0: not given
  std::string hosts;     // -H
  std::string hostfile;  // --hostfile
  std::vector<std::string> command;  // program and its arguments

  // Rendezvous and processes.
  std::string networkInterface;
  int port = 0;  // 0: any free port
  double startTimeoutSeconds = 30;
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
  bool gloo = false;
  bool mpi = false;
  std::optional<double> fusionThresholdMb;
  std::optional<double> cycleTimeMs;
  std::optional<int> cacheCapacity;
  std::string timelineFilename;
  bool autotune = false;
  std::string autotuneLogFile;
  std::string logLevel;
  std::optional<double> stallCheckWarningSeconds;
  std::optional<double> stallCheckShutdownSeconds;
  std::optional<double> timeoutSeconds;

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
ParsedCommandLine parseCommandLine(int argc, const char* const* argv);

// Horovod spells the rank count "-np"; CLI11 wants one letter after a single
// dash. Rewrites "-np" to "--num-proc" in kolorun's own flags only, never in
// the program's arguments. valueFlags: flags that take separate values, each
// listed once per value it takes.
std::vector<std::string> normalizeArgs(const std::vector<std::string>& args,
                                       const std::vector<std::string>& valueFlags);

using EnvList = std::vector<std::pair<std::string, std::string>>;

// KOLO_* variables for the tuning and backend flags that were given.
EnvList tuningEnv(const Options& options);

// Shortest decimal text for a number ("5", "0.25").
std::string formatNumber(double value);

}  // namespace kolo::launcher
