// ControlChannel conformance: bit allreduces, gatherv with empty and uneven
// payloads to every root, variable-length broadcast from every root, barrier.
#include <atomic>
#include <string>
#include <vector>

#include "comm/conformance.h"

namespace kolo::test {
namespace {

uint64_t bitsOf(int rank, size_t word) {
  uint64_t x = (static_cast<uint64_t>(rank) * 1000 + word + 1) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  // One bit set on every rank, so AND results are not all zero.
  return x | (uint64_t(1) << (word % 64));
}

std::vector<char> payload(int rank, int root, size_t length) {
  std::vector<char> bytes(length);
  for (size_t j = 0; j < length; ++j) {
    bytes[j] = static_cast<char>((rank * 31 + root * 7 + j) & 0xff);
  }
  return bytes;
}

size_t gatherLength(int rank, int root) {
  if ((rank + root) % 3 == 0) return 0;
  return static_cast<size_t>(rank) * 100 + root + 1;
}

void require(bool ok, const std::string& message) {
  if (!ok) throw std::runtime_error(message);
}

TEST_P(ControlChannelConformance, AllreduceAndOr) {
  const int n = worldSize();
  runControl(backend(), n, [n](int rank, comm::ControlChannel& ch) {
    for (size_t length : {size_t(0), size_t(1), size_t(5), size_t(300)}) {
      std::vector<uint64_t> wantAnd(length, ~uint64_t(0)), wantOr(length, 0);
      for (int r = 0; r < n; ++r) {
        for (size_t w = 0; w < length; ++w) {
          wantAnd[w] &= bitsOf(r, w);
          wantOr[w] |= bitsOf(r, w);
        }
      }
      std::vector<uint64_t> a(length), o(length);
      for (size_t w = 0; w < length; ++w) a[w] = o[w] = bitsOf(rank, w);
      ch.allreduceAnd(a);
      ch.allreduceOr(o);
      require(a == wantAnd, "allreduceAnd of " + std::to_string(length) +
                                " words differs on rank " + std::to_string(rank));
      require(o == wantOr, "allreduceOr of " + std::to_string(length) + " words differs on rank " +
                               std::to_string(rank));
    }
  });
}

TEST_P(ControlChannelConformance, GathervEveryRoot) {
  const int n = worldSize();
  runControl(backend(), n, [n](int rank, comm::ControlChannel& ch) {
    for (int root = 0; root < n; ++root) {
      auto got = ch.gatherv(payload(rank, root, gatherLength(rank, root)), root);
      if (rank != root) {
        require(got.empty(), "gatherv: non-root rank " + std::to_string(rank) + " got " +
                                 std::to_string(got.size()) + " entries");
        continue;
      }
      require(got.size() == static_cast<size_t>(n),
              "gatherv: root got " + std::to_string(got.size()) + " entries");
      for (int r = 0; r < n; ++r) {
        require(got[r] == payload(r, root, gatherLength(r, root)),
                "gatherv to root " + std::to_string(root) + ": bytes from rank " +
                    std::to_string(r) + " differ (got " + std::to_string(got[r].size()) +
                    " bytes)");
      }
    }
    // One large payload.
    const size_t big = rank == n - 1 ? (size_t(1) << 20) : 3;
    auto got = ch.gatherv(payload(rank, 0, big), 0);
    if (rank == 0) {
      for (int r = 0; r < n; ++r) {
        const size_t len = r == n - 1 ? (size_t(1) << 20) : 3;
        require(got[r] == payload(r, 0, len), "large gatherv differs");
      }
    }
  });
}

TEST_P(ControlChannelConformance, BroadcastEveryRoot) {
  const int n = worldSize();
  runControl(backend(), n, [n](int rank, comm::ControlChannel& ch) {
    for (int root = 0; root < n; ++root) {
      for (size_t length : {size_t(0), size_t(1), size_t(1000)}) {
        // Non-roots start with bytes of another length: the length travels.
        std::vector<char> bytes =
            rank == root ? payload(root, root, length) : payload(rank, root, 3);
        ch.broadcast(bytes, root);
        require(bytes == payload(root, root, length),
                "broadcast of " + std::to_string(length) + " bytes from root " +
                    std::to_string(root) + " differs on rank " + std::to_string(rank) + " (got " +
                    std::to_string(bytes.size()) + " bytes)");
      }
    }
    std::vector<char> bytes = rank == 0 ? payload(0, 0, 1 << 20) : std::vector<char>();
    ch.broadcast(bytes, 0);
    require(bytes == payload(0, 0, 1 << 20), "large broadcast differs");
  });
}

TEST_P(ControlChannelConformance, BarrierWaitsForEveryRank) {
  const int n = worldSize();
  std::atomic<int> arrived{0};
  runControl(backend(), n, [n, &arrived](int rank, comm::ControlChannel& ch) {
    for (int round = 1; round <= 5; ++round) {
      ++arrived;
      ch.barrier();
      const int seen = arrived.load();
      require(seen == n * round, "barrier round " + std::to_string(round) + " let rank " +
                                     std::to_string(rank) + " through after " +
                                     std::to_string(seen) + " arrivals");
      ch.barrier();  // nobody starts the next round before all checked
    }
  });
}

// The engine builds both from one store; their keys must not collide.
TEST_P(ControlChannelConformance, SharesStoreWithCollectives) {
  const int n = worldSize();
  const CommBackend& b = backend();
  runWithArgs(n, [n, &b](int rank, const comm::BackendArgs& args) {
    auto control = b.createControlChannel(args);
    auto collectives = b.createCollectives(args);
    std::vector<uint64_t> bits{uint64_t(1) << rank};
    control->allreduceOr(bits);
    std::vector<int32_t> values{rank + 1};
    collectives->allreduce(values.data(), 1, DataType::kInt32, ReduceOp::kSum);
    require(bits[0] == (uint64_t(1) << n) - 1, "control allreduceOr differs");
    require(values[0] == n * (n + 1) / 2, "data allreduce differs");
  });
}

}  // namespace
}  // namespace kolo::test
