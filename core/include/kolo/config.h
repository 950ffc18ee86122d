// Runtime configuration, parsed once from KOLO_* environment variables.
//
// Every variable kolo reads is listed here with its default; nothing else in
// the library reads the environment. A malformed value throws InvalidArgument
// naming the variable, the value and the accepted form.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace kolo {

enum class LogLevel : uint8_t { kTrace, kDebug, kInfo, kWarning, kError, kOff };

// Returns the value of an environment variable, or nullopt when unset. Tests
// pass a map-backed lookup instead of the process environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup processEnv();

struct Config {
  // KOLO_FUSION_THRESHOLD: bytes per fused buffer; 0 disables fusion.
  int64_t fusionThresholdBytes = 128LL * 1024 * 1024;
  // KOLO_CYCLE_TIME: milliseconds between coordination cycles when idle.
  std::chrono::microseconds cycleTime{1000};
  // KOLO_CACHE_CAPACITY: response cache entries; 0 disables the cache.
  int cacheCapacity = 4096;
  // KOLO_TIMEOUT: seconds before a silent peer is declared failed.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // KOLO_STALL_CHECK_TIME: seconds before a stall warning; 0 disables.
  std::chrono::milliseconds stallCheckTime{std::chrono::seconds(60)};
  // KOLO_STALL_SHUTDOWN_TIME: seconds before a stall fails the job; 0 = off.
  std::chrono::milliseconds stallShutdownTime{0};
  // KOLO_TIMELINE: path of a Chrome-trace timeline file; empty = off.
  std::string timelinePath;
  // KOLO_AUTOTUNE: tune fusion threshold and cycle time online.
  bool autotune = false;
  // KOLO_AUTOTUNE_LOG: CSV file (rank 0) with one row per autotune sample.
  std::string autotuneLogPath;
  // KOLO_AUTOTUNE_WARMUP_SAMPLES: samples discarded after each change.
  int autotuneWarmupSamples = 2;
  // KOLO_AUTOTUNE_SAMPLES: samples scored (median) per candidate setting.
  int autotuneSamples = 3;
  // KOLO_AUTOTUNE_SAMPLE_TIME: seconds of traffic per sample.
  std::chrono::milliseconds autotuneSampleTime{500};
  // KOLO_TIMELINE_MARK_CYCLES: add a CYCLE marker row to the timeline.
  bool timelineMarkCycles = false;
  // KOLO_LOG_LEVEL: trace|debug|info|warning|error|off.
  LogLevel logLevel = LogLevel::kWarning;
  // KOLO_CONTROLLER: gloo|mpi.
  std::string controller = "gloo";
  // KOLO_CPU_OPERATIONS: gloo|mpi.
  std::string cpuOperations = "gloo";
  // KOLO_GPU_OPERATIONS: nccl|mpi|gloo.
  std::string gpuOperations = "nccl";
  // KOLO_IFACE: network interface for the data plane (e.g. eth0); empty =
  // the interface that routes to the rendezvous store.
  std::string iface;

  // Not from the environment: when set, every log line of the engine is
  // also passed here (rank-tagged, formatted), from whichever thread logs.
  // For tests and applications that collect logs themselves.
  std::function<void(LogLevel level, const std::string& line)> logSink;

  static Config fromEnv(const EnvLookup& env = processEnv());
};

const char* toString(LogLevel level);

// Where this process sits in the job.
struct Identity {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  int localSize = 1;
  int crossRank = 0;
  int crossSize = 1;
};

// How this process reaches the job's rendezvous store.
struct Rendezvous {
  std::string addr;        // empty: no store needed (size 1)
  uint16_t port = 0;
  std::string secret;
  bool hostServer = false;  // true: this process (rank 0 under torchrun) serves it
};

// Identity and rendezvous as given by a launcher: kolorun's KOLO_* variables,
// torchrun's RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT, mpirun's
// OMPI_COMM_WORLD_* / PMI_*, or Slurm's SLURM_*. No launcher means size 1.
struct LaunchInfo {
  Identity identity;
  Rendezvous rendezvous;
  std::string launcher;  // "kolo", "kolo-elastic", "torchrun", "mpirun", "slurm" or "none"
  // Started by kolorun's elastic driver (KOLO_ELASTIC_WORKER): this process's
  // worker id, and identity stays unset until init() joins a world
  // (kolo/elastic_world.h); -1 otherwise.
  int64_t elasticWorker = -1;
};
LaunchInfo launchInfoFromEnv(const EnvLookup& env = processEnv());

}  // namespace kolo
