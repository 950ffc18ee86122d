// Shared-memory specifics beyond the conformance suite: segment lifetime and
// hostile store input, buffers many slots long, bitwise agreement, a late
// peer, the arena and the direct allreduce of buffers in it, and the host
// layout that decides where shared memory applies.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/conformance.h"
#include "comm/shm/arena.h"
#include "comm/shm/collectives.h"
#include "comm/shm/factory.h"
#include "comm/shm/host.h"
#include "comm/shm/segment.h"
#include "comm/test_values.h"
#include "kolo/error.h"
#include "kolo/shareable.h"
#include "kolo/store.h"

namespace kolo::test {
namespace {

std::string segmentNameIn(Store& store) {
  auto v = store.get("shm-data/shm/segment", std::chrono::seconds(1));
  return std::string(v.begin(), v.end());
}

bool existsInDevShm(const std::string& name) {
  return access(("/dev/shm" + name).c_str(), F_OK) == 0;
}

TEST(ShmSegment, NamesAreCheckedBeforeUse) {
  EXPECT_TRUE(comm::shm::Segment::validName("/kolo-0123456789abcdef0123456789abcdef"));
  for (const char* bad :
       {"", "/kolo-", "/etc/passwd", "/kolo-0123456789abcdef0123456789abcdeg",
        "/kolo-0123456789abcdef0123456789abcdef0", "kolo-0123456789abcdef012345678",
        "/kolo-../../../../etc/shadow00000000"}) {
    EXPECT_FALSE(comm::shm::Segment::validName(bad)) << bad;
    EXPECT_THROW(comm::shm::Segment::open(bad, 4096), InvalidArgument) << bad;
  }
}

TEST(ShmSegment, CreatedPrivateAndOpenedWithTheRightSize) {
  auto created = comm::shm::Segment::create(8192);
  const std::string name = created.name();
  ASSERT_TRUE(existsInDevShm(name));
  struct stat st {};
  ASSERT_EQ(stat(("/dev/shm" + name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_THROW(comm::shm::Segment::open(name, 4096), InvalidArgument);  // size differs
  {
    auto opened = comm::shm::Segment::open(name, 8192);
    created.data()[100] = 42;
    EXPECT_EQ(opened.data()[100], 42);
  }
  comm::shm::Segment::unlink(name);
  EXPECT_FALSE(existsInDevShm(name));
}

TEST(ShmBackend, NothingLeftInDevShmOnceEveryRankAttached) {
  std::vector<std::string> names(3);
  runWithArgs(3, [&](int rank, const comm::BackendArgs& args) {
    auto collectives = comm::shm::createCollectives(args);
    names[rank] = segmentNameIn(*args.store);
    EXPECT_FALSE(existsInDevShm(names[rank])) << names[rank];
    float x = 1;
    collectives->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(x, 3.0f);
  });
  EXPECT_EQ(names[0], names[1]);
  EXPECT_EQ(names[0], names[2]);
}

// Rank 1 of 2 alone, with the store already holding what rank 0 would put
// there: the setup must fail at once, with a message saying what was wrong.
std::string setupErrorWith(const std::string& segmentValue) {
  Config config = commConfig();
  config.timeout = std::chrono::seconds(5);
  Identity id;
  id.rank = 1;
  id.size = 2;
  auto store = makeHashStore();
  store->set("shm-data/shm/segment", std::vector<char>(segmentValue.begin(), segmentValue.end()));
  const auto start = std::chrono::steady_clock::now();
  try {
    comm::shm::createCollectives(comm::BackendArgs{config, id, store, "127.0.0.1"});
  } catch (const Error& e) {
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2)) << e.what();
    EXPECT_TRUE(store->check("shm-data/shm/attached/1")) << "rank 1 did not report its failure";
    return e.what();
  }
  ADD_FAILURE() << "no error for segment value '" << segmentValue << "'";
  return "";
}

TEST(ShmBackend, HostileSegmentNamesFromTheStoreAreRefused) {
  EXPECT_NE(setupErrorWith("/../../etc/passwd").find("malformed segment name"), std::string::npos);
  EXPECT_NE(setupErrorWith(std::string(100000, 'x')).find("malformed segment name"),
            std::string::npos);
  EXPECT_NE(setupErrorWith("/kolo-00000000000000000000000000000000").find("cannot open"),
            std::string::npos);
  EXPECT_NE(setupErrorWith("failed: /dev/shm is full").find("/dev/shm is full"), std::string::npos);
}

TEST(ShmBackend, WrongSizedSegmentIsRefused) {
  auto other = comm::shm::Segment::create(4096);
  const std::string error = setupErrorWith(other.name());
  comm::shm::Segment::unlink(other.name());
  EXPECT_NE(error.find("expected"), std::string::npos) << error;
}

// Every op on buffers several slot halves long, with lengths that end
// mid-step, mid-part and mid-cache-line.
TEST(ShmBackend, BuffersOfManySteps) {
  const int n = 3;
  const size_t half = comm::shm::kDataSlotBytes / 2;
  runWithArgs(n, [&](int rank, const comm::BackendArgs& args) {
    auto c = comm::shm::createCollectives(args);
    for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kInt8}) {
      const size_t es = elementSize(dtype);
      const size_t count = 2 * half / es + half / es / 3 + 17;
      TypedBuffer buf(dtype, count);
      for (size_t i = 0; i < count; ++i) buf.set(i, reduceInput(dtype, ReduceOp::kSum, rank, i));
      c->allreduce(buf.data(), count, dtype, ReduceOp::kSum);
      expectElements(buf, 0, count, std::string("allreduce ") + toString(dtype),
                     [&](size_t i) { return reduceExpected(dtype, ReduceOp::kSum, n, i); });

      std::vector<size_t> counts = {count / 2, 0, count + 5};
      const size_t total = counts[0] + counts[1] + counts[2];
      TypedBuffer in(dtype, total);
      for (size_t i = 0; i < total; ++i) in.set(i, reduceInput(dtype, ReduceOp::kMax, rank, i));
      TypedBuffer scattered(dtype, counts[rank]);
      c->reducescatter(in.data(), scattered.data(), counts, dtype, ReduceOp::kMax);
      const size_t offset = rank == 0 ? 0 : counts[0] + (rank == 2 ? counts[1] : 0);
      expectElements(scattered, 0, counts[rank], "reducescatter", [&](size_t j) {
        return reduceExpected(dtype, ReduceOp::kMax, n, offset + j);
      });

      TypedBuffer mine(dtype, counts[rank]);
      for (size_t i = 0; i < counts[rank]; ++i) mine.set(i, dataValue(dtype, rank * 7 + i));
      TypedBuffer gathered(dtype, total);
      c->allgatherv(mine.data(), gathered.data(), counts, dtype);
      size_t at = 0;
      for (int r = 0; r < n; ++r) {
        expectElements(gathered, at, counts[r], "allgatherv block " + std::to_string(r),
                       [&](size_t j) { return dataValue(dtype, r * 7 + j); });
        at += counts[r];
      }

      TypedBuffer bcast(dtype, count);
      for (size_t i = 0; i < count; ++i) bcast.set(i, dataValue(dtype, rank == 2 ? i : i + 1));
      c->broadcast(bcast.data(), count, dtype, 2);
      expectElements(bcast, 0, count, "broadcast", [&](size_t i) { return dataValue(dtype, i); });

      // Rank a sends (a + 1) * count / 2 + b elements to rank b.
      auto sent = [&](int a, int b) { return (a + 1) * half / es / 2 + b; };
      std::vector<size_t> sends(n), recvs(n);
      for (int r = 0; r < n; ++r) {
        sends[r] = sent(rank, r);
        recvs[r] = sent(r, rank);
      }
      TypedBuffer src(dtype, sends[0] + sends[1] + sends[2]);
      at = 0;
      for (int r = 0; r < n; ++r) {
        for (size_t j = 0; j < sends[r]; ++j) src.set(at + j, dataValue(dtype, rank * 5 + r + j));
        at += sends[r];
      }
      TypedBuffer dst(dtype, recvs[0] + recvs[1] + recvs[2]);
      c->alltoallv(src.data(), sends, dst.data(), recvs, dtype);
      at = 0;
      for (int r = 0; r < n; ++r) {
        expectElements(dst, at, recvs[r], "alltoallv from " + std::to_string(r),
                       [&](size_t j) { return dataValue(dtype, r * 5 + rank + j); });
        at += recvs[r];
      }
    }
  });
}

// Results of kStreamingBytes and more go out with streaming stores: a
// destination that does not start on a cache line (one element in) and a
// length that ends mid-line get every element.
TEST(ShmBackend, LargeResultsStreamOutToUnalignedBuffers) {
  const int n = 2;
  runWithArgs(n, [&](int rank, const comm::BackendArgs& args) {
    auto c = comm::shm::createCollectives(args);
    for (DataType dtype : {DataType::kFloat32, DataType::kInt8}) {
      const size_t es = elementSize(dtype);
      const size_t count = comm::shm::kStreamingBytes / es + 13;
      TypedBuffer buf(dtype, count + 1);
      for (size_t i = 0; i < count; ++i) {
        buf.set(i + 1, reduceInput(dtype, ReduceOp::kSum, rank, i));
      }
      c->allreduce(static_cast<char*>(buf.data()) + es, count, dtype, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(buf.get(i + 1), reduceExpected(dtype, ReduceOp::kSum, n, i))
            << toString(dtype) << " allreduce element " << i << " on rank " << rank;
      }

      const std::vector<size_t> counts = {count / 2 + 1, count / 2 + 7};
      TypedBuffer mine(dtype, counts[rank]);
      for (size_t i = 0; i < counts[rank]; ++i) mine.set(i, dataValue(dtype, rank * 3 + i));
      TypedBuffer gathered(dtype, counts[0] + counts[1] + 1);
      c->allgatherv(mine.data(), static_cast<char*>(gathered.data()) + es, counts, dtype);
      for (int r = 0, at = 1; r < n; at += static_cast<int>(counts[r]), ++r) {
        for (size_t j = 0; j < counts[r]; ++j) {
          ASSERT_EQ(gathered.get(at + j), dataValue(dtype, r * 3 + j))
              << toString(dtype) << " allgatherv block " << r << " element " << j;
        }
      }
    }
  });
}

// Random floats: every rank gets the same bits, those of a left fold in
// rank order, on the one-shot and the pipelined path.
TEST(ShmBackend, EveryRankGetsTheSameBits) {
  const int n = 3;
  const std::vector<size_t> counts = {1000, comm::shm::kDataSlotBytes};
  std::vector<std::vector<std::vector<float>>> inputs(counts.size());
  for (size_t c = 0; c < counts.size(); ++c) {
    std::mt19937 gen(7 + c);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    inputs[c].assign(n, std::vector<float>(counts[c]));
    for (auto& v : inputs[c]) {
      for (auto& x : v) x = dist(gen);
    }
  }
  std::vector<std::vector<std::vector<float>>> results(counts.size(),
                                                       std::vector<std::vector<float>>(n));
  runWithArgs(n, [&](int rank, const comm::BackendArgs& args) {
    auto c = comm::shm::createCollectives(args);
    for (size_t k = 0; k < counts.size(); ++k) {
      results[k][rank] = inputs[k][rank];
      c->allreduce(results[k][rank].data(), counts[k], DataType::kFloat32, ReduceOp::kSum);
    }
  });
  for (size_t k = 0; k < counts.size(); ++k) {
    for (size_t i = 0; i < counts[k]; ++i) {
      const float fold = (inputs[k][0][i] + inputs[k][1][i]) + inputs[k][2][i];
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(std::memcmp(&results[k][r][i], &fold, sizeof fold), 0)
            << "count " << counts[k] << " element " << i << " on rank " << r;
      }
    }
  }
}

// A peer that arrives long after the others: they sleep on the futex and
// wake when it publishes.
TEST(ShmBackend, LatePeerIsWaitedFor) {
  runWithArgs(2, [&](int rank, const comm::BackendArgs& args) {
    auto c = comm::shm::createCollectives(args);
    auto control = comm::shm::createControlChannel(args);
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::vector<double> v(5000, rank + 1.0);
    c->allreduce(v.data(), v.size(), DataType::kFloat64, ReduceOp::kSum);
    EXPECT_EQ(v[4999], 3.0);
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    control->barrier();
  });
}

// Why this process has no arena (then the direct tests skip), or empty.
std::string noArena() {
  if (comm::shm::Arena::forThisProcess() != nullptr) return "";
  return "this process has no arena (an address space limit, or no memfd_create)";
}

// The arena's blocks: page aligned, zero-filled (again after reuse: a
// freed block's pages are punched out), found by offsetOf, and a request
// larger than the arena is null rather than an error.
TEST(ShmArena, BlocksAreZeroFilledAlignedAndGivenBack) {
  if (const std::string why = noArena(); !why.empty()) GTEST_SKIP() << why;
  auto arena = comm::shm::Arena::forThisProcess();
  EXPECT_EQ(comm::shm::Arena::existing(), arena);
  const size_t bytes = 3 * 4096 + 100;
  auto* a = static_cast<unsigned char*>(arena->allocate(bytes));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 4096, 0u);
  const int64_t offset = arena->offsetOf(a, bytes);
  EXPECT_GE(offset, 0);
  for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(a[i], 0) << "byte " << i;
  std::memset(a, 0xab, bytes);
  auto* b = static_cast<unsigned char*>(arena->allocate(bytes));
  ASSERT_NE(b, nullptr);
  EXPECT_GE(std::abs(b - a), static_cast<std::ptrdiff_t>(4 * 4096)) << "blocks overlap";
  arena->free(a);
  auto* again = static_cast<unsigned char*>(arena->allocate(bytes));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(arena->offsetOf(again, bytes), offset) << "the freed block was not reused first";
  for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(again[i], 0) << "reused byte " << i;
  arena->free(again);
  arena->free(b);

  int onStack = 0;
  EXPECT_EQ(arena->offsetOf(&onStack, sizeof onStack), -1);
  EXPECT_EQ(arena->offsetOf(arena->base() + arena->size() - 8, 16), -1) << "runs past the end";
  EXPECT_EQ(arena->allocate(arena->size() + 1), nullptr);
  EXPECT_EQ(allocateShareable(arena->size() + 1), nullptr);
  std::shared_ptr<void> shared = allocateShareable(100);
  ASSERT_NE(shared, nullptr);
  EXPECT_GE(arena->offsetOf(shared.get(), 100), 0);
}

// Another process maps the arena through /proc/<pid>/fd/<fd> and sees (and
// writes) the same memory; a descriptor that is not an arena maps nothing.
TEST(ShmArena, AnotherProcessMapsItThroughProc) {
  if (const std::string why = noArena(); !why.empty()) GTEST_SKIP() << why;
  auto arena = comm::shm::Arena::forThisProcess();
  auto* block = static_cast<int*>(arena->allocate(4096));
  ASSERT_NE(block, nullptr);
  block[0] = 1234;
  const int64_t offset = arena->offsetOf(block, 4096);
  const pid_t parent = getpid();
  const int fd = arena->fd();
  const int notAnArena = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t child = fork();
  if (child == 0) {
    // The child's own inherited view is not used: it maps the parent's.
    const comm::shm::Arena::Mapping m = comm::shm::Arena::mapPeer(parent, fd);
    int rc = 0;
    if (m.base == nullptr || m.size != arena->size()) rc = 2;
    if (rc == 0 && reinterpret_cast<int*>(m.base + offset)[0] != 1234) rc = 3;
    if (rc == 0) reinterpret_cast<int*>(m.base + offset)[1] = 5678;
    if (comm::shm::Arena::mapPeer(parent, notAnArena).base != nullptr) rc = 4;
    std::_Exit(rc);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(notAnArena);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: not mapped, 3: other memory, 4: a non-arena mapped";
  EXPECT_EQ(block[1], 5678) << "the child's write did not reach this process";
  arena->free(block);
}

comm::shm::Collectives& asShm(comm::Collectives& c) {
  return dynamic_cast<comm::shm::Collectives&>(c);
}

// Buffers in the ranks' arenas (allocateShareable, as the reducer's
// buckets), from kDirectBytes on, are reduced in place: every dtype and
// op, odd lengths, 2 to 4 ranks, the same values as through the slots.
// Below kDirectBytes they take the one-step path.
TEST(ShmDirect, BuffersInTheArenasAreReducedInPlace) {
  if (const std::string why = noArena(); !why.empty()) GTEST_SKIP() << why;
  for (int n : {2, 3, 4}) {
    runWithArgs(n, [&](int rank, const comm::BackendArgs& args) {
      auto c = comm::shm::createCollectives(args);
      uint64_t direct = 0;
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                             DataType::kInt32, DataType::kInt8}) {
        const size_t es = elementSize(dtype);
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct}) {
          // The smallest direct count, a larger odd one, and the largest
          // that is not direct.
          const size_t first = (comm::shm::kDirectBytes + es - 1) / es;
          for (size_t count : {first, 40 * first + 17, first - 1}) {
            ShareableBuffer buf(dtype, count);
            ASSERT_NE(buf.data(), nullptr);
            for (size_t i = 0; i < count; ++i) buf.values.set(i, reduceInput(dtype, op, rank, i));
            buf.in();
            c->allreduce(buf.data(), count, dtype, op);
            buf.out();
            if (count * es >= comm::shm::kDirectBytes) ++direct;
            const std::string what = std::string(toString(dtype)) + " " + toString(op) + " of " +
                                     std::to_string(count) + " on " + std::to_string(n) + " ranks";
            expectElements(buf.values, 0, count, what,
                           [&](size_t i) { return reduceExpected(dtype, op, n, i); });
            ASSERT_EQ(asShm(*c).directAllreduces(), direct) << what << ": not reduced in place";
          }
        }
      }
    });
  }
}

// The direct path reduces in rank order, as the slots do, and folds the
// average's multiply in the same way: bit for bit the slots' result.
TEST(ShmDirect, TheSameBitsAsThroughTheSlots) {
  if (const std::string why = noArena(); !why.empty()) GTEST_SKIP() << why;
  const int n = 3;
  const size_t count = 2 * comm::shm::kDataSlotBytes / 4 + 5;
  std::vector<std::vector<float>> inputs(n, std::vector<float>(count));
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : inputs) {
    for (auto& x : v) x = dist(gen);
  }
  std::vector<std::vector<float>> slots(n), direct(n);
  runWithArgs(n, [&](int rank, const comm::BackendArgs& args) {
    auto c = comm::shm::createCollectives(args);
    slots[rank] = inputs[rank];
    c->allreduceScaled(slots[rank].data(), count, DataType::kFloat32, ReduceOp::kSum, 1.0 / n);
    std::shared_ptr<void> block = allocateShareable(count * sizeof(float));
    ASSERT_NE(block, nullptr);
    auto* mine = static_cast<float*>(block.get());
    std::copy(inputs[rank].begin(), inputs[rank].end(), mine);
    c->allreduceScaled(mine, count, DataType::kFloat32, ReduceOp::kSum, 1.0 / n);
    EXPECT_EQ(asShm(*c).directAllreduces(), 1u);
    direct[rank].assign(mine, mine + count);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(std::memcmp(direct[r].data(), slots[0].data(), count * sizeof(float)), 0)
        << "rank " << r << "'s direct result differs from the slots'";
    ASSERT_EQ(std::memcmp(slots[r].data(), slots[0].data(), count * sizeof(float)), 0);
  }
}

// A rank whose buffer is not in its arena: every rank goes through the
// slots for that allreduce (the same values), and the next one, with every
// buffer in the arenas, is direct again.
TEST(ShmDirect, OneOrdinaryBufferSendsEveryRankThroughTheSlots) {
  if (const std::string why = noArena(); !why.empty()) GTEST_SKIP() << why;
  const int n = 3;
  runWithArgs(n, [&](int rank, const comm::BackendArgs& args) {
    auto c = comm::shm::createCollectives(args);
    const size_t count = comm::shm::kDirectBytes / 4 * 2 + 3;
    for (int round = 0; round < 2; ++round) {
      const bool ordinary = round == 0 && rank == 1;
      ShareableBuffer shareable(DataType::kFloat32, count);
      TypedBuffer plain(DataType::kFloat32, count);
      TypedBuffer& values = ordinary ? plain : shareable.values;
      for (size_t i = 0; i < count; ++i) {
        values.set(i, reduceInput(DataType::kFloat32, ReduceOp::kSum, rank, i));
      }
      if (!ordinary) shareable.in();
      c->allreduce(ordinary ? plain.data() : shareable.data(), count, DataType::kFloat32,
                   ReduceOp::kSum);
      if (!ordinary) shareable.out();
      expectElements(values, 0, count, "round " + std::to_string(round), [&](size_t i) {
        return reduceExpected(DataType::kFloat32, ReduceOp::kSum, n, i);
      });
      EXPECT_EQ(asShm(*c).directAllreduces(), static_cast<uint64_t>(round))
          << "round " << round << " on rank " << rank;
    }
  });
}

// Learning where the buffers lie costs ordinary buffers no
// synchronisation of their own: it is the slots' first step. A buffer of
// one chunk takes 3 through the slots (step 0, step 1, the end), whether
// or not the group could reduce in place; 2 direct; and 4 when only some
// ranks' buffers are in their arenas (those ranks stage their first chunk
// after the exchange).
TEST(ShmDirect, OrdinaryBuffersSynchroniseAsOftenAsThroughTheSlotsAlone) {
  if (const std::string why = noArena(); !why.empty()) GTEST_SKIP() << why;
  const int n = 2;
  runWithArgs(n, [&](int rank, const comm::BackendArgs& args) {
    auto c = comm::shm::createCollectives(args);
    auto& shm = asShm(*c);
    const size_t count = comm::shm::kDirectBytes / 4 * 4;  // 64 KiB: one chunk
    auto synchronisations = [&](bool shareable) {
      ShareableBuffer block(DataType::kFloat32, count);
      TypedBuffer plain(DataType::kFloat32, count);
      TypedBuffer& values = shareable ? block.values : plain;
      for (size_t i = 0; i < count; ++i) {
        values.set(i, reduceInput(DataType::kFloat32, ReduceOp::kSum, rank, i));
      }
      if (shareable) block.in();
      const uint32_t before = shm.synchronisations();
      c->allreduce(shareable ? block.data() : plain.data(), count, DataType::kFloat32,
                   ReduceOp::kSum);
      const uint32_t took = shm.synchronisations() - before;
      if (shareable) block.out();
      expectElements(values, 0, count, "allreduce", [&](size_t i) {
        return reduceExpected(DataType::kFloat32, ReduceOp::kSum, n, i);
      });
      return took;
    };
    EXPECT_EQ(synchronisations(true), 2u) << "direct";
    EXPECT_EQ(synchronisations(false), 3u) << "every buffer ordinary";
    EXPECT_EQ(synchronisations(rank == 0), 4u) << "rank 0's buffer in its arena, rank 1's not";
    EXPECT_EQ(shm.directAllreduces(), 1u);
  });
}

TEST(HostLayout, GroupsRanksByKey) {
  auto layout = comm::shm::layoutOf({"a", "b", "a", "b"});
  EXPECT_EQ(layout.hostCount(), 2);
  EXPECT_TRUE(layout.uniform());
  EXPECT_EQ(layout.hosts[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(layout.hosts[1], (std::vector<int>{1, 3}));
  EXPECT_EQ(layout.localRank(2), 1);
  EXPECT_EQ(layout.localSize(3), 2);
  EXPECT_EQ(layout.describe(), "2 hosts of 2 ranks");

  auto uneven = comm::shm::layoutOf({"x", "x", "y"});
  EXPECT_FALSE(uneven.uniform());
  EXPECT_EQ(uneven.describe(), "hosts of 2 and 1 ranks");
  EXPECT_EQ(comm::shm::layoutOf({"x"}).describe(), "1 host of 1 rank");
}

TEST(HostLayout, ThisProcessHasAStableKey) {
  const std::string key = comm::shm::hostKey();
  EXPECT_EQ(key, comm::shm::hostKey());
  EXPECT_LE(key.size(), comm::shm::kMaxHostKeyBytes);
  EXPECT_NE(key.find(" net "), std::string::npos) << key;
}

TEST(HostLayout, ExchangedThroughTheStore) {
  std::vector<comm::shm::HostLayout> layouts(4);
  Config config = commConfig();
  config.hostKeyOverride = [](int rank) { return rank == 3 ? "b" : "a"; };
  runWithArgs(
      4,
      [&](int rank, const comm::BackendArgs& args) {
        layouts[rank] = comm::shm::exchangeLayout(args);
      },
      config);
  for (const auto& l : layouts) EXPECT_EQ(l.describe(), "hosts of 3 and 1 ranks");
}

TEST(HostLayout, OversizedKeyInTheStoreIsRefused) {
  Config config = commConfig();
  Identity id;
  id.size = 2;
  auto store = makeHashStore();
  store->set("host/1", std::vector<char>(comm::shm::kMaxHostKeyBytes + 1, 'k'));
  try {
    comm::shm::exchangeLayout(comm::BackendArgs{config, id, store, "127.0.0.1"});
    ADD_FAILURE() << "an oversized key was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kolo::test
