// Helpers for gtest binaries that run as an mpirun job (test_comm_mpi,
// tests/mpi): the world's shape, agreeing on a failure, and a main() that
// makes every rank exit with the same status.
#pragma once

#include <string>

namespace kolo::test {

// MPI_COMM_WORLD size and rank; from the launcher's environment before MPI
// is initialised (gtest instantiates parameters early), from MPI afterwards.
int mpiWorldSize();
int mpiWorldRank();

// Collective over MPI_COMM_WORLD. Every rank passes its failure message
// (empty: none) and whether it is a root cause (not a PeerFailure/Timeout
// caused by another rank's failure). Returns the same text on every rank:
// empty when no rank failed, else the lowest rank's root cause, else the
// lowest rank's failure.
std::string agreeOnFailure(const std::string& failure, bool rootCause);

// main() for MPI gtest binaries: initialises MPI through kolo's runtime
// (unless appInitialisesMpi: then with MPI_Init_thread itself, and finalises
// it), prints gtest's progress on rank 0 only (failures on every rank),
// runs the tests and returns the worst status of all ranks on every rank.
// excluded: gtest patterns (':'-separated) to leave out, added to --gtest_filter.
int runMpiTests(int argc, char** argv, bool appInitialisesMpi,
                const std::string& excluded = "");

}  // namespace kolo::test
