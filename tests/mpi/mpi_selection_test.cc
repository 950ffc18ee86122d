// How kolo picks MPI from the environment (no mpirun needed): under mpirun
// with neither KOLO_CONTROLLER nor KOLO_CPU_OPERATIONS set, both default to
// mpi and no rendezvous store is needed; anything involving gloo still
// needs one, with an error that says so.
#include <map>
#include <optional>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "kolo/config.h"
#include "kolo/error.h"

namespace kolo {
namespace {

EnvLookup envOf(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::map<std::string, std::string> mpirun(int rank, int size) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(size)}};
}

TEST(MpiSelection, MpirunWithNothingSetMeansMpiForBoth) {
  Config c = Config::fromEnv(envOf(mpirun(1, 2)));
  EXPECT_EQ(c.controller, "mpi");
  EXPECT_EQ(c.cpuOperations, "mpi");
  auto pmi = envOf({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}});
  EXPECT_EQ(Config::fromEnv(pmi).controller, "mpi");
}

TEST(MpiSelection, AnExplicitChoiceTurnsTheDefaultOff) {
  auto env = mpirun(0, 2);
  env["KOLO_CPU_OPERATIONS"] = "gloo";
  Config c = Config::fromEnv(envOf(env));
  EXPECT_EQ(c.controller, "gloo");
  EXPECT_EQ(c.cpuOperations, "gloo");
  env["KOLO_CPU_OPERATIONS"] = "mpi";
  c = Config::fromEnv(envOf(env));
  EXPECT_EQ(c.controller, "gloo");  // mixed, as asked
  EXPECT_EQ(c.cpuOperations, "mpi");
}

TEST(MpiSelection, OtherLaunchersKeepGloo) {
  EXPECT_EQ(Config::fromEnv(envOf({})).controller, "gloo");
  auto kolorun = mpirun(0, 2);
  kolorun["KOLO_RANK"] = "0";  // kolorun's own workers (gloo mode)
  EXPECT_EQ(Config::fromEnv(envOf(kolorun)).controller, "gloo");
  auto torchrun = mpirun(0, 2);
  torchrun["RANK"] = "0";
  torchrun["WORLD_SIZE"] = "2";
  EXPECT_EQ(Config::fromEnv(envOf(torchrun)).cpuOperations, "gloo");
}

TEST(MpiSelection, AllMpiNeedsNoRendezvous) {
  LaunchInfo info = launchInfoFromEnv(envOf(mpirun(1, 2)));
  EXPECT_EQ(info.launcher, "mpirun");
  EXPECT_EQ(info.identity.rank, 1);
  EXPECT_TRUE(info.rendezvous.addr.empty());
  auto explicitMpi = mpirun(1, 2);
  explicitMpi["KOLO_CONTROLLER"] = "mpi";
  explicitMpi["KOLO_CPU_OPERATIONS"] = "mpi";
  EXPECT_TRUE(launchInfoFromEnv(envOf(explicitMpi)).rendezvous.addr.empty());
}

TEST(MpiSelection, GivenAddressIsStillUsedWithMpi) {
  auto env = mpirun(0, 2);
  env["MASTER_ADDR"] = "127.0.0.1";
  env["MASTER_PORT"] = "29500";
  LaunchInfo info = launchInfoFromEnv(envOf(env));
  EXPECT_EQ(info.rendezvous.addr, "127.0.0.1");
  EXPECT_TRUE(info.rendezvous.hostServer);
}

TEST(MpiSelection, MixedModeWithoutAStoreIsAClearError) {
  auto env = mpirun(0, 2);
  env["KOLO_CONTROLLER"] = "mpi";
  env["KOLO_CPU_OPERATIONS"] = "gloo";
  try {
    launchInfoFromEnv(envOf(env));
    ADD_FAILURE() << "mixed mode without MASTER_ADDR was accepted";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("gloo needs a rendezvous store"), std::string::npos) << what;
    EXPECT_NE(what.find("MASTER_ADDR"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace kolo
