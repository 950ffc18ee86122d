// Conformance suite for comm::ControlChannel and comm::Collectives, written
// once for every backend. A backend opts in with one macro in its own test
// file (see gloo_test.cc):
//
//   KOLO_COMM_CONFORMANCE(Gloo, kolo::comm::gloo::createControlChannel,
//                         kolo::comm::gloo::createCollectives);
//
// Ranks run as threads of the test process over one in-memory store
// (kolo::test::runRanks); each test builds fresh channels on every rank, so a
// failing test cannot poison the next one.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "comm/backend_args.h"
#include "comm/collectives.h"
#include "comm/control_channel.h"
#include "kolo/config.h"

namespace kolo::test {

struct CommBackend {
  std::string name;
  std::function<std::unique_ptr<comm::ControlChannel>(const comm::BackendArgs&)>
      createControlChannel;
  std::function<std::unique_ptr<comm::Collectives>(const comm::BackendArgs&)> createCollectives;
};

// gtest prints parameters with this (names, not bytes).
inline void PrintTo(const CommBackend& backend, std::ostream* os) { *os << backend.name; }

// Config for conformance runs: a timeout long enough for a loaded 2-core CI
// machine, short enough that a hang fails inside the harness limit.
Config commConfig();

// Runs fn on n ranks (threads) over one fresh in-memory store; args carry the
// rank's identity, config and the store (as the engine would pass them).
void runWithArgs(int n, const std::function<void(int rank, const comm::BackendArgs&)>& fn,
                 const Config& config = commConfig());

// Runs fn on n ranks, each with the channel(s) the backend builds for it.
// Channels are destroyed on each rank's thread after fn returns.
void runCollectives(const CommBackend& backend, int n,
                    const std::function<void(int rank, comm::Collectives&)>& fn,
                    const Config& config = commConfig());
void runControl(const CommBackend& backend, int n,
                const std::function<void(int rank, comm::ControlChannel&)>& fn,
                const Config& config = commConfig());

// Parameter: (backend, world size).
class CommConformance : public ::testing::TestWithParam<std::tuple<CommBackend, int>> {
 protected:
  const CommBackend& backend() const { return std::get<0>(GetParam()); }
  int worldSize() const { return std::get<1>(GetParam()); }
};
using CollectivesConformance = CommConformance;
using ControlChannelConformance = CommConformance;

// Parameter: backend; world sizes are chosen by each test.
class CommFailureConformance : public ::testing::TestWithParam<CommBackend> {
 protected:
  const CommBackend& backend() const { return GetParam(); }
};

std::string commTestName(const ::testing::TestParamInfo<std::tuple<CommBackend, int>>& info);
std::string commFailureTestName(const ::testing::TestParamInfo<CommBackend>& info);

}  // namespace kolo::test

#define KOLO_COMM_CONFORMANCE(NAME, CREATE_CONTROL, CREATE_COLLECTIVES)                         \
  namespace kolo::test {                                                                        \
  static const CommBackend kCommBackend##NAME{#NAME, CREATE_CONTROL, CREATE_COLLECTIVES};       \
  INSTANTIATE_TEST_SUITE_P(NAME, CollectivesConformance,                                        \
                           ::testing::Combine(::testing::Values(kCommBackend##NAME),            \
                                              ::testing::Values(1, 2, 3, 4, 8)),                \
                           commTestName);                                                       \
  INSTANTIATE_TEST_SUITE_P(NAME, ControlChannelConformance,                                     \
                           ::testing::Combine(::testing::Values(kCommBackend##NAME),            \
                                              ::testing::Values(1, 2, 3, 4, 8)),                \
                           commTestName);                                                       \
  INSTANTIATE_TEST_SUITE_P(NAME, CommFailureConformance, ::testing::Values(kCommBackend##NAME), \
                           commFailureTestName);                                                \
  } /* namespace kolo::test */                                                                  \
  static_assert(true, "")
