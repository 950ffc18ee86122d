// The environment of a Kubeflow PyTorchJob pod, and what torchrun adds in
// it, for the tests that read it (launch_info_test.cc in-process,
// kubernetes_test.cc in real pods).
#pragma once

#include <cstdlib>
#include <map>
#include <string>

namespace kolo {

// The operator's variables for the pod of RANK `rank` (0: the Master; i + 1:
// Worker i) in a job of `pods` pods, nprocPerNode "auto" (its default)
// unless given.
inline std::map<std::string, std::string> pytorchJobPod(int rank, int pods,
                                                        const std::string& masterAddr,
                                                        int masterPort,
                                                        const std::string& nprocPerNode = "auto") {
  int perNode = std::atoi(nprocPerNode.c_str());
  if (perNode < 1) perNode = 1;
  return {{"PYTHONUNBUFFERED", "1"},
          {"MASTER_PORT", std::to_string(masterPort)},
          {"PET_MASTER_PORT", std::to_string(masterPort)},
          {"MASTER_ADDR", masterAddr},
          {"PET_MASTER_ADDR", masterAddr},
          {"WORLD_SIZE", std::to_string(pods * perNode)},
          {"RANK", std::to_string(rank)},
          {"PET_NODE_RANK", std::to_string(rank)},
          {"PET_NPROC_PER_NODE", nprocPerNode},
          {"PET_NNODES", std::to_string(pods)}};
}

// What torchrun (static rendezvous, as the operator's PET_* select) adds
// for its local process `local` of `perNode` in pod `node` of `pods`
// (torch/distributed/elastic/agent/server/local_elastic_agent.py).
inline std::map<std::string, std::string> withTorchrun(std::map<std::string, std::string> env,
                                                       int node, int pods, int local,
                                                       int perNode) {
  const std::string rank = std::to_string(node * perNode + local);
  const std::string world = std::to_string(pods * perNode);
  env["RANK"] = rank;
  env["LOCAL_RANK"] = std::to_string(local);
  env["GROUP_RANK"] = std::to_string(node);
  env["ROLE_RANK"] = rank;
  env["ROLE_NAME"] = "default";
  env["LOCAL_WORLD_SIZE"] = std::to_string(perNode);
  env["WORLD_SIZE"] = world;
  env["GROUP_WORLD_SIZE"] = std::to_string(pods);
  env["ROLE_WORLD_SIZE"] = world;
  env["TORCHELASTIC_RESTART_COUNT"] = "0";
  env["TORCHELASTIC_MAX_RESTARTS"] = "0";
  env["TORCHELASTIC_RUN_ID"] = "none";
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["OMP_NUM_THREADS"] = "1";
  return env;
}

}  // namespace kolo
