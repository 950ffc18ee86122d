// comm::nccl::Communicator's locking, without a GPU: this executable
// defines the NCCL and CUDA runtime calls the Communicator makes, and its
// definitions take the place of libnccl's and libcudart's for
// libkolo_core (the executable's symbols come first in the dynamic
// linker's lookup). The stand-in keeps a non-blocking communicator in
// ncclInProgress for as long as a test says, as a lazy connect does, and
// notes any call on a communicator after ncclCommAbort freed it.
//
// Every wait is bounded; a Communicator that holds its lock through the
// wait fails these tests after its timeout instead of hanging them.
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "comm/nccl/communicator.h"
#include "kolo/error.h"
#include "kolo/store.h"

namespace {

struct FakeNccl {
  std::atomic<bool> hold{false};    // ncclCommGetAsyncError says ncclInProgress
  std::atomic<bool> remoteError{false};  // ... or, before that, ncclRemoteError
  std::atomic<int> looks{0};        // calls of ncclCommGetAsyncError
  std::atomic<bool> aborted{false};
  std::atomic<int> usedAfterAbort{0};
  int device = 0;
};
FakeNccl fake;
char fakeComm;  // the one communicator's handle

ncclComm_t handle() { return reinterpret_cast<ncclComm_t>(&fakeComm); }

void touch(ncclComm_t comm) {
  if (comm == handle() && fake.aborted.load()) ++fake.usedAfterAbort;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof(*id));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int, ncclUniqueId, int,
                                    ncclConfig_t*) {
  *comm = handle();
  fake.aborted = false;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  touch(comm);
  ++fake.looks;
  *state = fake.remoteError.load() ? ncclRemoteError
           : fake.hold.load()      ? ncclInProgress
                                   : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  touch(comm);
  fake.aborted = true;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  touch(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  touch(comm);
  fake.aborted = true;  // freed as well
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t) { return "stand-in NCCL error"; }
const char* ncclGetLastError(ncclComm_t) { return ""; }

cudaError_t cudaGetDevice(int* device) {
  *device = fake.device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  fake.device = device;
  return cudaSuccess;
}

}  // extern "C"

namespace kolo {
namespace {

using namespace std::chrono_literals;
using comm::nccl::Communicator;

// A Communicator of one rank over the stand-in, with a timeout long enough
// that a wait which only the timeout ends is told apart from one that an
// event ends.
constexpr auto kTimeout = 30s;
constexpr auto kPrompt = 10s;  // an event ends a wait well within this

std::unique_ptr<Communicator> connectOne() {
  fake.hold = false;
  auto store = makeHashStore();
  return Communicator::connect(*store, "nccl.id", 0, 1, 0, kTimeout,
                               [](std::vector<char>&, int) {});
}

// Starts run() on another thread with the communicator held in
// ncclInProgress, and returns once that run is in its wait.
std::future<std::string> runHeld(Communicator& comm) {
  fake.hold = true;
  const int before = fake.looks.load();
  auto result = std::async(std::launch::async, [&comm]() -> std::string {
    try {
      comm.run("allreduce", nullptr, [] { return ncclInProgress; });
      return "returned";
    } catch (const std::exception& e) {
      return e.what();
    }
  });
  const auto until = std::chrono::steady_clock::now() + kPrompt;
  while (fake.looks.load() < before + 3 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_GE(fake.looks.load(), before + 3) << "run() never waited for NCCL";
  return result;
}

TEST(NcclCommunicator, AsyncErrorAnswersWhileARunWaitsForNccl) {
  auto comm = connectOne();
  auto run = runHeld(*comm);
  auto status = std::async(std::launch::async, [&] { return comm->asyncError(); });
  const bool answered = status.wait_for(kPrompt) == std::future_status::ready;
  fake.hold = false;  // the run goes through now
  EXPECT_TRUE(answered) << "asyncError() waited behind run()'s wait for NCCL";
  EXPECT_TRUE(status.get().ok());
  EXPECT_EQ(run.get(), "returned");
  comm.reset();
  EXPECT_EQ(fake.usedAfterAbort.load(), 0);
}

TEST(NcclCommunicator, AbortEndsARunThatWaitsForNccl) {
  auto comm = connectOne();
  fake.usedAfterAbort = 0;
  auto run = runHeld(*comm);
  const auto start = std::chrono::steady_clock::now();
  auto aborted = std::async(std::launch::async, [&] { comm->abort(); });
  const bool abortReturned = aborted.wait_for(kPrompt) == std::future_status::ready;
  const bool runEnded = run.wait_for(kPrompt) == std::future_status::ready;
  const auto took = std::chrono::steady_clock::now() - start;
  fake.hold = false;
  EXPECT_TRUE(abortReturned) << "abort() waited behind run()'s wait for NCCL";
  EXPECT_TRUE(runEnded) << "run() went on waiting after the abort";
  EXPECT_LT(took, kPrompt);
  const std::string what = run.get();
  EXPECT_NE(what.find("nccl allreduce failed"), std::string::npos) << what;
  EXPECT_NE(what.find("aborted"), std::string::npos) << what;
  aborted.get();
  comm.reset();
  EXPECT_EQ(fake.usedAfterAbort.load(), 0) << "the communicator was used after ncclCommAbort";
}

// A peer's failure that NCCL reports while a run waits ends the run at
// once, whichever thread sees it first (the run's own look, or the
// completion watcher's asyncError() between two looks), and the
// communicator is aborted, so that kernels waiting for that peer end.
TEST(NcclCommunicator, APeerFailureWhileARunWaitsEndsItAndAborts) {
  auto comm = connectOne();
  fake.usedAfterAbort = 0;
  auto run = runHeld(*comm);
  fake.remoteError = true;
  auto status = std::async(std::launch::async, [&] { return comm->asyncError(); });
  const bool runEnded = run.wait_for(kPrompt) == std::future_status::ready;
  const bool answered = status.wait_for(kPrompt) == std::future_status::ready;
  fake.remoteError = false;
  fake.hold = false;
  EXPECT_TRUE(runEnded) << "run() went on waiting after NCCL reported a failure";
  EXPECT_TRUE(answered);
  EXPECT_FALSE(status.get().ok());
  EXPECT_NE(run.get().find("nccl allreduce failed"), std::string::npos);
  EXPECT_TRUE(fake.aborted.load()) << "the communicator was not aborted";
  comm.reset();
  EXPECT_EQ(fake.usedAfterAbort.load(), 0) << "the communicator was used after ncclCommAbort";
}

// The lock released between looks changes nothing for a wait that only
// the timeout ends.
TEST(NcclCommunicator, ARunThatNcclNeverTakesTimesOutNamingIt) {
  fake.hold = false;
  auto store = makeHashStore();
  auto quick = Communicator::connect(*store, "nccl.id", 0, 1, 0, 200ms,
                                     [](std::vector<char>&, int) {});
  fake.usedAfterAbort = 0;
  fake.hold = true;
  try {
    quick->run("allreduce", nullptr, [] { return ncclInProgress; });
    ADD_FAILURE() << "run() returned while NCCL never took the work";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("no progress from a peer"), std::string::npos)
        << e.what();
  }
  fake.hold = false;
  quick.reset();
  EXPECT_EQ(fake.usedAfterAbort.load(), 0);
}

}  // namespace
}  // namespace kolo
