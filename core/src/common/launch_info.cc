// Identity and rendezvous from whichever launcher started this process.
#include <cerrno>
#include <cstdlib>

#include "kolo/config.h"
#include "kolo/error.h"

namespace kolo {
namespace {

class EnvReader {
 public:
  explicit EnvReader(const EnvLookup& env) : env_(env) {}

  bool has(const std::string& name) const { return env_(name).has_value(); }

  std::string str(const std::string& name, const std::string& fallback = "") const {
    auto v = env_(name);
    return v ? *v : fallback;
  }

  int integer(const std::string& name, int min, int fallback, bool required,
              const std::string& launcher) const {
    auto v = env_(name);
    if (!v) {
      if (required) {
        throw InvalidArgument(name + " is not set; " + launcher +
                              " sets it for every process (set it yourself when launching by hand)");
      }
      return fallback;
    }
    errno = 0;
    char* end = nullptr;
    long n = std::strtol(v->c_str(), &end, 10);
    if (v->empty() || *end != '\0' || errno != 0 || n < min || n > (1 << 24)) {
      throw InvalidArgument("invalid value for " + name + ": '" + *v +
                            "' (expected an integer >= " + std::to_string(min) + ")");
    }
    return static_cast<int>(n);
  }

 private:
  const EnvLookup& env_;
};

void checkIdentity(const Identity& id, const std::string& launcher) {
  auto fail = [&](const std::string& what) {
    throw InvalidArgument("inconsistent identity from " + launcher + ": " + what);
  };
  if (id.size < 1) fail("size " + std::to_string(id.size) + " < 1");
  if (id.rank < 0 || id.rank >= id.size) {
    fail("rank " + std::to_string(id.rank) + " is outside [0, " + std::to_string(id.size) + ")");
  }
  if (id.localRank < 0 || id.localRank >= id.localSize) {
    fail("local rank " + std::to_string(id.localRank) + " is outside [0, " +
         std::to_string(id.localSize) + ")");
  }
  if (id.crossRank < 0 || id.crossRank >= id.crossSize) {
    fail("cross rank " + std::to_string(id.crossRank) + " is outside [0, " +
         std::to_string(id.crossSize) + ")");
  }
}

uint16_t portFrom(const EnvReader& env, const std::string& name, int offset) {
  int port = env.integer(name, 1, 0, true, "the launcher") + offset;
  if (port > 65535) {
    throw InvalidArgument("invalid value for " + name + ": port out of range");
  }
  return static_cast<uint16_t>(port);
}

// Rendezvous for launchers without a store of ours: rank 0 hosts one at
// MASTER_ADDR:MASTER_PORT+1 (torchrun's own store already holds MASTER_PORT),
// or at KOLO_RENDEZVOUS_ADDR/PORT when those are given.
Rendezvous rankZeroHosted(const EnvReader& env, const Identity& id,
                          const std::string& launcher) {
  Rendezvous rv;
  if (id.size == 1) return rv;
  if (env.has("KOLO_RENDEZVOUS_ADDR")) {
    rv.addr = env.str("KOLO_RENDEZVOUS_ADDR");
    rv.port = portFrom(env, "KOLO_RENDEZVOUS_PORT", 0);
  } else if (env.has("MASTER_ADDR")) {
    rv.addr = env.str("MASTER_ADDR");
    rv.port = portFrom(env, "MASTER_PORT", 1);
  } else {
    throw InvalidArgument(
        "started by " + launcher + " with " + std::to_string(id.size) +
        " ranks but no rendezvous address: set MASTER_ADDR and MASTER_PORT "
        "(rank 0's host and a free port; kolo listens on MASTER_PORT+1) or "
        "KOLO_RENDEZVOUS_ADDR/KOLO_RENDEZVOUS_PORT, or start with kolorun");
  }
  // KOLO_RENDEZVOUS_HOSTED: the launcher (kolorun --mpi) serves the store.
  rv.hostServer = id.rank == 0 && env.str("KOLO_RENDEZVOUS_HOSTED", "0") == "0";
  rv.secret = env.str("KOLO_SECRET_KEY");
  if (rv.secret.empty()) {
    // Not secret, but shared by the job's processes and different per job;
    // docs/reference/environment.md says to set KOLO_SECRET_KEY on untrusted networks.
    rv.secret = "kolo-insecure:" + env.str("TORCHELASTIC_RUN_ID", env.str("SLURM_JOB_ID", "")) +
                ":" + rv.addr + ":" + std::to_string(rv.port);
  }
  return rv;
}

// MASTER_ADDR / KOLO_RENDEZVOUS_ADDR naming this host over loopback.
bool isLoopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

// A Kubeflow PyTorchJob with nprocPerNode N > 1 counts N processes per pod
// in WORLD_SIZE and expects torchrun in the container to start them (torchrun
// reads the operator's PET_* variables and sets LOCAL_RANK for each). Without
// LOCAL_RANK this process is the pod's only one and the job could never
// assemble; say so instead of timing out at rendezvous.
void refuseNodeOfSeveralProcesses(const EnvReader& env) {
  const std::string perNode = env.str("PET_NPROC_PER_NODE");
  char* end = nullptr;
  const long n = std::strtol(perNode.c_str(), &end, 10);
  if (perNode.empty() || *end != '\0' || n <= 1) return;  // unset, "auto", "gpu", 1
  throw InvalidArgument(
      "PET_NPROC_PER_NODE=" + perNode + " (a PyTorchJob's nprocPerNode) makes WORLD_SIZE=" +
      env.str("WORLD_SIZE") + " count " + perNode +
      " processes per pod, but LOCAL_RANK is not set, so this process was not started by "
      "torchrun: start the container's program with torchrun (it reads PET_NNODES, "
      "PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT), or set "
      "nprocPerNode to \"1\" for one process per pod");
}

int parseSlurmTasksPerNode(const std::string& text) {
  // "4(x2),3" -> tasks on the first node; good enough when nodes are uniform.
  return std::atoi(text.c_str());
}

}  // namespace

LaunchInfo launchInfoFromEnv(const EnvLookup& lookup) {
  EnvReader env(lookup);
  LaunchInfo info;
  Identity& id = info.identity;

  if (env.has("KOLO_ELASTIC_WORKER")) {
    // kolorun's elastic driver: rank and size come from the world init()
    // joins through the store, so only the store and the worker id are here.
    info.launcher = "kolo-elastic";
    const std::string who = "kolorun (elastic)";
    info.elasticWorker = env.integer("KOLO_ELASTIC_WORKER", 0, 0, true, who);
    info.rendezvous.addr = env.str("KOLO_RENDEZVOUS_ADDR");
    if (info.rendezvous.addr.empty()) {
      throw InvalidArgument("KOLO_ELASTIC_WORKER is set but KOLO_RENDEZVOUS_ADDR is not; "
                            "elastic workers are started by kolorun, which sets both");
    }
    info.rendezvous.port = portFrom(env, "KOLO_RENDEZVOUS_PORT", 0);
    info.rendezvous.secret = env.str("KOLO_SECRET_KEY");
    if (info.rendezvous.secret.empty()) {
      throw InvalidArgument("KOLO_SECRET_KEY is not set; kolorun passes the job's secret "
                            "to every worker");
    }
    return info;
  }

  if (env.has("KOLO_RANK")) {
    info.launcher = "kolo";
    const std::string who = "kolorun";
    id.rank = env.integer("KOLO_RANK", 0, 0, true, who);
    id.size = env.integer("KOLO_SIZE", 1, 1, true, who);
    id.localRank = env.integer("KOLO_LOCAL_RANK", 0, id.rank, false, who);
    id.localSize = env.integer("KOLO_LOCAL_SIZE", 1, id.size, false, who);
    id.crossRank = env.integer("KOLO_CROSS_RANK", 0, 0, false, who);
    id.crossSize = env.integer("KOLO_CROSS_SIZE", 1, 1, false, who);
    checkIdentity(id, who);
    // kolorun watches its store for every rank's arrival, so connect to it
    // even when the job has a single rank.
    if (id.size > 1 || env.has("KOLO_RENDEZVOUS_ADDR")) {
      if (!env.has("KOLO_RENDEZVOUS_ADDR")) {
        throw InvalidArgument("KOLO_RANK is set but KOLO_RENDEZVOUS_ADDR is not; "
                              "start the job with kolorun or set KOLO_RENDEZVOUS_ADDR/PORT");
      }
      info.rendezvous.addr = env.str("KOLO_RENDEZVOUS_ADDR");
      info.rendezvous.port = portFrom(env, "KOLO_RENDEZVOUS_PORT", 0);
      info.rendezvous.secret = env.str("KOLO_SECRET_KEY");
      if (info.rendezvous.secret.empty()) {
        throw InvalidArgument("KOLO_SECRET_KEY is not set; kolorun passes the job's secret "
                              "to every worker (set it yourself when launching by hand)");
      }
    }
    return info;
  }

  if (env.has("RANK") && env.has("WORLD_SIZE")) {
    info.launcher = "torchrun";
    const std::string who = "torchrun";
    id.rank = env.integer("RANK", 0, 0, true, who);
    id.size = env.integer("WORLD_SIZE", 1, 1, true, who);
    if (env.has("LOCAL_RANK")) {
      // torchrun: a node's ranks are consecutive, GROUP_RANK is the node's.
      id.localRank = env.integer("LOCAL_RANK", 0, 0, true, who);
      id.localSize = env.integer("LOCAL_WORLD_SIZE", 1, id.size, false, who);
      const int nodes = id.size / id.localSize > 0 ? id.size / id.localSize : 1;
      id.crossRank = env.integer("GROUP_RANK", 0, id.rank / id.localSize, false, who);
      id.crossSize = env.integer("GROUP_WORLD_SIZE", 1, nodes, false, who);
    } else {
      refuseNodeOfSeveralProcesses(env);
      if (isLoopback(env.str("KOLO_RENDEZVOUS_ADDR", env.str("MASTER_ADDR")))) {
        // Every rank reaches rank 0 over loopback, so all run on this host.
        id.localRank = id.rank;
        id.localSize = id.size;
      } else {
        // One process per host, as in a Kubeflow PyTorchJob's pods.
        id.crossRank = id.rank;
        id.crossSize = id.size;
      }
    }
    checkIdentity(id, who);
    info.rendezvous = rankZeroHosted(env, id, who);
    return info;
  }

  if (env.has("OMPI_COMM_WORLD_RANK") || env.has("PMI_RANK")) {
    info.launcher = "mpirun";
    const std::string who = "mpirun";
    bool ompi = env.has("OMPI_COMM_WORLD_RANK");
    id.rank = env.integer(ompi ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK", 0, 0, true, who);
    id.size = env.integer(ompi ? "OMPI_COMM_WORLD_SIZE" : "PMI_SIZE", 1, 1, true, who);
    id.localRank = env.integer("OMPI_COMM_WORLD_LOCAL_RANK", 0, id.rank, false, who);
    id.localSize = env.integer("OMPI_COMM_WORLD_LOCAL_SIZE", 1, id.size, false, who);
    id.crossSize = id.size / id.localSize > 0 ? id.size / id.localSize : 1;
    id.crossRank = id.rank / id.localSize;
    checkIdentity(id, who);
    if (id.size > 1 && !env.has("KOLO_RENDEZVOUS_ADDR") && !env.has("MASTER_ADDR")) {
      // With control and data both over MPI the job needs no store of ours:
      // each process keeps its bookkeeping keys in a private in-memory store.
      const Config config = Config::fromEnv(lookup);
      if (config.controller == "mpi" && config.cpuOperations == "mpi") return info;
      throw InvalidArgument(
          "started by mpirun with " + std::to_string(id.size) + " ranks, KOLO_CONTROLLER=" +
          config.controller + " and KOLO_CPU_OPERATIONS=" + config.cpuOperations +
          ": gloo needs a rendezvous store but none is given; set MASTER_ADDR and "
          "MASTER_PORT (rank 0's host and a free port; kolo listens on MASTER_PORT+1) or "
          "KOLO_RENDEZVOUS_ADDR/KOLO_RENDEZVOUS_PORT, or set both variables to mpi");
    }
    info.rendezvous = rankZeroHosted(env, id, who);
    return info;
  }

  if (env.has("SLURM_PROCID") && env.has("SLURM_NTASKS")) {
    info.launcher = "slurm";
    const std::string who = "srun";
    id.rank = env.integer("SLURM_PROCID", 0, 0, true, who);
    id.size = env.integer("SLURM_NTASKS", 1, 1, true, who);
    id.localRank = env.integer("SLURM_LOCALID", 0, 0, false, who);
    int perNode = parseSlurmTasksPerNode(env.str("SLURM_TASKS_PER_NODE", ""));
    id.localSize = perNode > 0 ? perNode : id.size;
    id.crossRank = env.integer("SLURM_NODEID", 0, 0, false, who);
    id.crossSize = env.integer("SLURM_NNODES", 1, 1, false, who);
    checkIdentity(id, who);
    info.rendezvous = rankZeroHosted(env, id, who);
    return info;
  }

  info.launcher = "none";
  return info;
}

}  // namespace kolo
