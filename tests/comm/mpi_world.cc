#include "comm/mpi_world.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/mpi/runtime.h"

namespace kolo::test {
namespace {

int envInt(const char* a, const char* b, int fallback) {
  for (const char* name : {a, b}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return fallback;
}

// On ranks other than 0: one line per failed test, naming the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

}  // namespace

int mpiWorldSize() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return envInt("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", 1);
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int mpiWorldRank() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return envInt("OMPI_COMM_WORLD_RANK", "PMI_RANK", 0);
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::string agreeOnFailure(const std::string& failure, bool rootCause) {
  const int n = mpiWorldSize();
  // Per rank: [kind, length]; kind 0 = ok, 1 = consequence, 2 = root cause.
  int mine[2] = {failure.empty() ? 0 : (rootCause ? 2 : 1), static_cast<int>(failure.size())};
  std::vector<int> all(2 * n);
  MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> counts(n), displs(n);
  int total = 0;
  for (int r = 0; r < n; ++r) {
    counts[r] = all[2 * r + 1];
    displs[r] = total;
    total += counts[r];
  }
  std::vector<char> text(total + 1);
  MPI_Allgatherv(failure.data(), static_cast<int>(failure.size()), MPI_CHAR, text.data(),
                 counts.data(), displs.data(), MPI_CHAR, MPI_COMM_WORLD);
  for (int kind : {2, 1}) {
    for (int r = 0; r < n; ++r) {
      if (all[2 * r] == kind) return std::string(text.data() + displs[r], counts[r]);
    }
  }
  return "";
}

int runMpiTests(int argc, char** argv, bool appInitialisesMpi, const std::string& excluded) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!excluded.empty()) {
    std::string filter = ::testing::GTEST_FLAG(filter);
    filter += (filter.find('-') == std::string::npos ? "-" : ":") + excluded;
    ::testing::GTEST_FLAG(filter) = filter;
  }
  std::unique_ptr<comm::mpi::RuntimeUse> runtime;
  if (appInitialisesMpi) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  } else {
    runtime = std::make_unique<comm::mpi::RuntimeUse>();
  }
  const int rank = mpiWorldRank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int status = RUN_ALL_TESTS();
  int worst = status;
  MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  runtime.reset();
  if (appInitialisesMpi) MPI_Finalize();
  return worst;
}

}  // namespace kolo::test
