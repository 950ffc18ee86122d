/// \file
/// Runtime configuration, parsed once from KOLO_* environment variables.
///
/// Every variable kolo reads is listed here with its default; nothing else in
/// the library reads the environment. A malformed value throws InvalidArgument
/// naming the variable, the value and the accepted form.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kolo {

/// kolo's device runtime seam (internal; see docs/developers/device-runtime.md).
namespace device {
class Runtime;
}  // namespace device

/// Severity of a log line (KOLO_LOG_LEVEL); lines below Config::logLevel
/// are dropped. kOff drops everything.
enum class LogLevel : uint8_t { kTrace, kDebug, kInfo, kWarning, kError, kOff };
/// \var kolo::LogLevel::kTrace
/// The most verbose level: everything below too.
/// \var kolo::LogLevel::kDebug
/// Also engine start-up (rank, controller, data plane) and process-set changes.
/// \var kolo::LogLevel::kInfo
/// Also the autotuner's samples and choices.
/// \var kolo::LogLevel::kWarning
/// Also warnings: stalled tensors, dropped timeline events. The default.
/// \var kolo::LogLevel::kError
/// Only errors (a failed engine, a completion callback that threw).
/// \var kolo::LogLevel::kOff
/// Nothing.

/// Returns the value of an environment variable, or nullopt when unset. Tests
/// pass a map-backed lookup instead of the process environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
/// An EnvLookup over the process environment (std::getenv at each call).
EnvLookup processEnv();

/// Lines Config::fromEnv has to report: each HOROVOD_* variable that is set
/// but means nothing to kolo (or that a KOLO_* variable overrides), naming it
/// and what kolo does instead. Shared by the copies of one Config; the first
/// engine made from any of them logs the lines at info level, once.
struct ConfigNotices {
  /// The lines to log, in the order fromEnv found them.
  std::vector<std::string> lines;
  /// Set by the engine that logged the lines.
  std::once_flag logged;
};

/// The engine's settings. Config::fromEnv() reads them once from KOLO_*
/// variables (the default engine does at kolo::init()); programs that build
/// an Engine directly may set the fields themselves. Times are held as
/// std::chrono durations; the variables give them in the unit each field
/// names. A plain value: copy it freely.
///
/// Horovod's runtime variables (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME,
/// ...) are read as aliases of the KOLO_* ones, in Horovod's units; the
/// KOLO_* variable wins when both are set. docs/migrating/horovod-environment.md
/// lists every one.
struct Config {
  /// KOLO_FUSION_THRESHOLD: bytes per fused buffer; 0 disables fusion.
  int64_t fusionThresholdBytes = 128LL * 1024 * 1024;
  /// KOLO_CYCLE_TIME: milliseconds between coordination cycles while work is
  /// pending; an idle engine backs off to a few times this.
  std::chrono::microseconds cycleTime{1000};
  /// KOLO_SPIN_TIME: microseconds a thread polls instead of sleeping where a
  /// wake-up is due soon: the background thread after it completed work, and
  /// a caller waiting on a handle. Saves the two thread wake-ups of a small
  /// operation; never spins on an idle job. 0 disables. Unset: 50 when the
  /// CPUs of this process's affinity mask number at least two per local rank
  /// (a spinning thread then has a core of its own), else 0 (a spinner would
  /// take the core the thread it waits for needs; a rank pinned to one core
  /// gets 0 however large the host).
  std::optional<std::chrono::microseconds> spinTime;
  /// KOLO_CACHE_CAPACITY: response cache entries; 0 disables the cache.
  int cacheCapacity = 4096;
  /// KOLO_TIMEOUT: seconds before a silent peer is declared failed.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  /// KOLO_STALL_CHECK_TIME: seconds before a stall warning; 0 disables.
  std::chrono::milliseconds stallCheckTime{std::chrono::seconds(60)};
  /// KOLO_STALL_SHUTDOWN_TIME: seconds a tensor may wait for ranks that never
  /// submit it before the job fails on every rank with an error naming the
  /// tensor and those ranks (per process set); 0 waits forever. Default 600
  /// s, like PyTorch's collectives' 10-minute timeout: a rank stuck in
  /// another collective (say, after its own error) must not hang the job.
  /// Raise it for jobs whose ranks legitimately wait longer (e.g. in a
  /// barrier while one rank evaluates for over 10 minutes).
  std::chrono::milliseconds stallShutdownTime{std::chrono::seconds(600)};
  /// Not from the environment: how the stall shutdown error names the
  /// setting behind stallShutdownTime, for programs that set it from a
  /// setting of their own (the c10d backend: the process group's timeout).
  std::string stallShutdownSetting = "KOLO_STALL_SHUTDOWN_TIME";
  /// KOLO_TIMELINE: path of a Chrome-trace timeline file; empty = off.
  std::string timelinePath;
  /// KOLO_AUTOTUNE: tune fusion threshold and cycle time online.
  bool autotune = false;
  /// KOLO_AUTOTUNE_LOG: CSV file (rank 0) with one row per autotune sample.
  std::string autotuneLogPath;
  /// KOLO_AUTOTUNE_WARMUP_SAMPLES: samples discarded after each change.
  int autotuneWarmupSamples = 2;
  /// KOLO_AUTOTUNE_SAMPLES: samples scored (median) per candidate setting.
  int autotuneSamples = 3;
  /// KOLO_AUTOTUNE_SAMPLE_TIME: seconds of traffic per sample.
  std::chrono::milliseconds autotuneSampleTime{500};
  /// KOLO_TIMELINE_MARK_CYCLES: add a CYCLE marker row to the timeline.
  bool timelineMarkCycles = false;
  /// KOLO_LOG_LEVEL: trace|debug|info|warning|error|off.
  LogLevel logLevel = LogLevel::kWarning;
  /// KOLO_LOG_HIDE_TIME: log lines without their timestamp.
  bool logHideTime = false;
  /// KOLO_CONTROLLER: gloo|mpi. Under mpirun in a build with MPI, when
  /// neither this nor KOLO_CPU_OPERATIONS is set, both default to mpi.
  std::string controller = "gloo";
  /// KOLO_CPU_OPERATIONS: gloo|mpi.
  std::string cpuOperations = "gloo";
  /// KOLO_GPU_OPERATIONS: nccl|mpi|gloo.
  std::string gpuOperations = "nccl";
  /// KOLO_IFACE: network interface for the data plane (e.g. eth0), or names
  /// separated by commas of which each rank uses the first its host has;
  /// empty = the interface that routes to the rendezvous store.
  std::string iface;
  /// KOLO_SHM: shared memory among the ranks of a host: the control and data
  /// plane of a group whose ranks all share one host, and the local stage of
  /// hierarchical collectives. Off: KOLO_CONTROLLER / KOLO_CPU_OPERATIONS
  /// everywhere. nullopt (unset or "auto"): on, except when KOLO_CONTROLLER
  /// and KOLO_CPU_OPERATIONS are both mpi (MPI then carries everything, with
  /// shared memory of its own within a host, and needs no rendezvous store).
  std::optional<bool> shm;
  /// KOLO_HIERARCHICAL_ALLREDUCE (alias HOROVOD_HIERARCHICAL_ALLREDUCE):
  /// allreduce across hosts as a shared-memory reduce-scatter in each host,
  /// an allreduce of each slice among the ranks of equal local rank, and a
  /// shared-memory allgather. nullopt (unset or "auto"): on when the group
  /// spans several hosts with the same number (> 1) of ranks each; with
  /// KOLO_AUTOTUNE the autotuner then picks flat or hierarchical.
  std::optional<bool> hierarchicalAllreduce;
  /// KOLO_HIERARCHICAL_ALLGATHER (alias HOROVOD_HIERARCHICAL_ALLGATHER): the
  /// same two levels for allgather and broadcast.
  std::optional<bool> hierarchicalAllgather;

  /// Not from the environment: when set, every log line of the engine is
  /// also passed here (rank-tagged, formatted), from whichever thread logs.
  /// For tests and applications that collect logs themselves.
  std::function<void(LogLevel level, const std::string& line)> logSink;
  /// Not from the environment: when set, the host of each rank of a group
  /// (called with the rank in the group) instead of the detected one; ranks
  /// with equal strings share memory. For tests that run several "hosts" as
  /// threads of one process.
  std::function<std::string(int rank)> hostKeyOverride;
  /// Not from the environment: the number negotiation errors and stall
  /// reports call each rank of the engine by, indexed by its rank (the
  /// c10d backend's two-rank engines name the ranks of the group they
  /// serve); empty: their own ranks.
  std::vector<int> rankNames;
  /// Set by fromEnv (null otherwise): what to report once at init.
  std::shared_ptr<ConfigNotices> notices;
  /// Not from the environment: the device runtime CUDA tensors go through;
  /// nullptr (the default) is CUDA. kolo's tests set an in-process host
  /// runtime that stands in for an absent GPU.
  std::shared_ptr<device::Runtime> deviceRuntime;

  /// Parses every variable above from env (the process environment by
  /// default); unset ones keep their defaults. Throws InvalidArgument naming
  /// the variable, the value and the accepted form for a malformed one.
  static Config fromEnv(const EnvLookup& env = processEnv());
};

/// Lower-case name of level, as KOLO_LOG_LEVEL spells it; static storage.
const char* toString(LogLevel level);

/// Where this process sits in the job.
struct Identity {
  int rank = 0;       ///< Rank in the job, 0 .. size-1.
  int size = 1;       ///< Number of ranks in the job.
  int localRank = 0;  ///< Rank among the ranks on this host.
  int localSize = 1;  ///< Number of ranks on this host.
  int crossRank = 0;  ///< Index of this host among the job's hosts.
  int crossSize = 1;  ///< Number of hosts.
};

/// What identifies this process's host, as kolo counts hosts: equal for
/// processes that share one kernel, /dev/shm and network and PID namespaces
/// (shared memory works between them; network namespaces count as hosts of
/// their own). Programs that learn the job's layout themselves (the c10d
/// backend) compare these to fill Identity's local and cross ranks.
std::string hostKey();

/// How this process reaches the job's rendezvous store.
struct Rendezvous {
  std::string addr;        ///< empty: no store needed (size 1)
  uint16_t port = 0;       ///< TCP port of the store server.
  std::string secret;      ///< The job's secret (KOLO_SECRET_KEY) for the store's HMAC handshake.
  bool hostServer = false;  ///< true: this process (rank 0 under torchrun) serves it
};

/// Identity and rendezvous as given by a launcher: kolorun's KOLO_* variables,
/// torchrun's RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT, mpirun's
/// OMPI_COMM_WORLD_* / PMI_*, or Slurm's SLURM_*. No launcher means size 1.
struct LaunchInfo {
  Identity identity;      ///< This process's place in the job.
  Rendezvous rendezvous;  ///< Where the job's store is.
  std::string launcher;  ///< "kolo", "kolo-elastic", "torchrun", "mpirun", "slurm" or "none"
  /// Started by kolorun's elastic driver (KOLO_ELASTIC_WORKER): this process's
  /// worker id, and identity stays unset until init() joins a world
  /// (kolo/elastic_world.h); -1 otherwise.
  int64_t elasticWorker = -1;
};
/// Reads LaunchInfo from env (the process environment by default). Throws
/// InvalidArgument naming the variable for missing, malformed or
/// inconsistent values (e.g. a rank outside [0, size)).
LaunchInfo launchInfoFromEnv(const EnvLookup& env = processEnv());

}  // namespace kolo
