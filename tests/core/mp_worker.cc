// A kolo program for multi-process tests: kolo::init() from the environment,
// then one scenario. Prints "OK" and exits 0, or prints the error to stdout
// and exits 3. Scenarios: sum (20 small allreduces), stop / die (rank 1
// stops or exits after one), every-op (every op against references, prints
// EVERY-OP), kill-mid / stop-mid (rank 1 killed or stopped 300 ms into
// back-to-back 64 MB allreduces), exit-without-shutdown (returns from main
// after one allreduce), exit-hung-callback (returns from main while a
// completion callback never returns), kill-in-set (rank 1 killed 300 ms
// into 64 MB allreduces of the set {0, 1} while the others wait in set 0).
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "core/ops_util.h"
#include "kolo/kolo.h"

namespace {

void allreduceStep(int step) {
  auto& engine = kolo::defaultEngine();
  std::vector<float> v(1000, static_cast<float>(kolo::rank() + 1));
  kolo::Request q;
  q.name = "grad";
  q.dtype = kolo::DataType::kFloat32;
  q.shape = {1000};
  kolo::Entry e;
  e.input = v.data();
  e.output = v.data();
  engine.enqueue(q, e).wait();
  const float want = kolo::size() * (kolo::size() + 1) / 2.0f;
  if (v[999] != want) {
    std::printf("step %d: got %f want %f\n", step, v[999], want);
    std::exit(4);
  }
}

// 64 MB float32 allreduces back to back: each takes milliseconds, so a
// signal that arrives at a random moment most likely finds every rank inside
// the data-plane collective. Prints which step failed.
// processSet: 0, or one of `members` ranks.
void largeAllreducesUntilError(int processSet = 0, int members = kolo::size()) {
  auto& engine = kolo::defaultEngine();
  std::vector<float> v(size_t(16) << 20, 1.0f);
  for (int step = 0;; ++step) {
    kolo::Request q;
    q.name = "large";
    q.dtype = kolo::DataType::kFloat32;
    q.shape = {static_cast<int64_t>(v.size())};
    q.processSet = processSet;
    engine.enqueue(q, kolo::Entry{v.data(), v.data(), {}, {}}).wait();
    // No refill between steps (it would take as long as the allreduce).
    if (step == 0 && v.back() != static_cast<float>(members)) {
      std::printf("step %d: got %f\n", step, v.back());
      std::exit(4);
    }
  }
}

void expectNear(double got, double want, kolo::DataType dtype, const std::string& what) {
  using kolo::DataType;
  const double tolerance = dtype == DataType::kFloat16    ? 2e-3
                           : dtype == DataType::kBFloat16 ? 1e-2
                                                          : 1e-6;
  if (std::fabs(got - want) > tolerance * std::max(1.0, std::fabs(want))) {
    throw std::runtime_error(what + ": got " + std::to_string(got) + ", want " +
                             std::to_string(want));
  }
}

// Every op through the default engine, checked against references: fused
// small allreduces with every reduce op, one large allreduce (in place,
// several shared-memory steps), broadcast from every root, allgather of
// uneven rows, alltoall and reducescatter, for a few dtypes.
void everyOp() {
  using namespace kolo;
  using test::load;
  using test::makeBuffer;
  using test::makeRequest;
  using test::reference;
  using test::valueFor;
  using test::wrapTo;
  auto& engine = defaultEngine();
  const int size = kolo::size();
  const int rank = kolo::rank();
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
    const std::string type = toString(dtype);
    std::vector<std::vector<char>> bufs;
    std::vector<Handle> handles;
    const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                       ReduceOp::kMax, ReduceOp::kProduct};
    for (size_t k = 0; k < ops.size(); ++k) {
      bufs.push_back(makeBuffer(dtype, 1027, rank, ops[k]));
      handles.push_back(engine.enqueue(
          makeRequest("small." + type + std::to_string(k), OpType::kAllreduce, dtype, {1027}, ops[k]),
          test::inPlace(bufs.back())));
    }
    const size_t large = (size_t(3) << 20) / elementSize(dtype) + 5;
    bufs.push_back(makeBuffer(dtype, large, rank));
    handles.push_back(engine.enqueue(
        makeRequest("large." + type, OpType::kAllreduce, dtype, {static_cast<int64_t>(large)}),
        test::inPlace(bufs.back())));
    for (auto& h : handles) h.wait();
    for (size_t k = 0; k < ops.size(); ++k) {
      for (size_t i = 0; i < 1027; ++i) {
        expectNear(load(dtype, bufs[k].data(), i), wrapTo(dtype, reference(ops[k], dtype, size, i)),
                   dtype, "allreduce " + type + " " + toString(ops[k]) + " element " + std::to_string(i));
      }
    }
    for (size_t i = 0; i < large; i += 97) {
      expectNear(load(dtype, bufs.back().data(), i),
                 wrapTo(dtype, reference(ReduceOp::kSum, dtype, size, i)), dtype,
                 "large allreduce " + type + " element " + std::to_string(i));
    }

    for (int root = 0; root < size; ++root) {
      auto buf = makeBuffer(dtype, 100003, rank);
      Request q = makeRequest("bcast." + type, OpType::kBroadcast, dtype, {100003});
      q.root = root;
      engine.enqueue(q, test::inPlace(buf)).wait();
      for (size_t i = 0; i < 100003; i += 31) {
        expectNear(load(dtype, buf.data(), i), wrapTo(dtype, valueFor(root, i, dtype)), dtype,
                   "broadcast " + type + " from root " + std::to_string(root));
      }
    }

    // allgather: rank r has r * 1000 + 1 rows of 3.
    auto rowsOf = [](int r) { return static_cast<int64_t>(r) * 1000 + 1; };
    auto in = makeBuffer(dtype, static_cast<size_t>(rowsOf(rank) * 3), rank);
    std::vector<char> out;
    Entry e;
    e.input = in.data();
    e.allocate = [&](const std::vector<int64_t>& shape) {
      out.resize(static_cast<size_t>(numElements(shape)) * elementSize(dtype) + 1);
      return static_cast<void*>(out.data());
    };
    engine.enqueue(makeRequest("gather." + type, OpType::kAllgather, dtype, {rowsOf(rank), 3}), e)
        .wait();
    size_t pos = 0;
    for (int r = 0; r < size; ++r) {
      for (size_t i = 0; i < static_cast<size_t>(rowsOf(r) * 3); ++i, ++pos) {
        expectNear(load(dtype, out.data(), pos), wrapTo(dtype, valueFor(r, i, dtype)), dtype,
                   "allgather " + type + " block of rank " + std::to_string(r));
      }
    }

    // alltoall: rank r sends j + 1 rows of 2 to rank j.
    std::vector<int64_t> splits(size);
    int64_t sendRows = 0;
    for (int j = 0; j < size; ++j) sendRows += (splits[j] = j + 1);
    auto send = makeBuffer(dtype, static_cast<size_t>(sendRows * 2), rank);
    std::vector<char> recv;
    Request aq = makeRequest("a2a." + type, OpType::kAlltoall, dtype, {sendRows, 2});
    aq.splits = splits;
    Entry ae;
    ae.input = send.data();
    ae.allocate = [&](const std::vector<int64_t>& shape) {
      recv.resize(static_cast<size_t>(numElements(shape)) * elementSize(dtype) + 1);
      return static_cast<void*>(recv.data());
    };
    engine.enqueue(aq, ae).wait();
    size_t offset = 0;
    for (int j = 0; j < rank; ++j) offset += static_cast<size_t>(j + 1) * 2;
    pos = 0;
    for (int src = 0; src < size; ++src) {
      for (size_t i = 0; i < static_cast<size_t>(rank + 1) * 2; ++i, ++pos) {
        expectNear(load(dtype, recv.data(), pos), wrapTo(dtype, valueFor(src, offset + i, dtype)),
                   dtype, "alltoall " + type + " from rank " + std::to_string(src));
      }
    }

    // reducescatter (sum) of 2 * size + 1 rows of 2.
    const int64_t rsRows = 2 * size + 1;
    auto rsIn = makeBuffer(dtype, static_cast<size_t>(rsRows * 2), rank);
    std::vector<char> rsOut;
    Entry re;
    re.input = rsIn.data();
    re.allocate = [&](const std::vector<int64_t>& shape) {
      rsOut.resize(static_cast<size_t>(numElements(shape)) * elementSize(dtype) + 1);
      return static_cast<void*>(rsOut.data());
    };
    engine.enqueue(makeRequest("rs." + type, OpType::kReducescatter, dtype, {rsRows, 2}), re).wait();
    int64_t firstRow = 0;
    for (int r = 0; r < rank; ++r) firstRow += rsRows / size + (r < rsRows % size ? 1 : 0);
    const int64_t myRows = rsRows / size + (rank < rsRows % size ? 1 : 0);
    for (size_t i = 0; i < static_cast<size_t>(myRows * 2); ++i) {
      const size_t gi = static_cast<size_t>(firstRow * 2) + i;
      expectNear(load(dtype, rsOut.data(), i),
                 wrapTo(dtype, reference(ReduceOp::kSum, dtype, size, gi)), dtype,
                 "reducescatter " + type + " element " + std::to_string(gi));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "sum";
  try {
    kolo::init();
    if (scenario == "every-op") {
      everyOp();
      std::printf("EVERY-OP rank=%d size=%d\n", kolo::rank(), kolo::size());
    } else if (scenario == "sum") {
      for (int step = 0; step < 20; ++step) allreduceStep(step);
    } else if (scenario == "stop" || scenario == "die") {
      allreduceStep(0);
      if (kolo::rank() == 1) {
        if (scenario == "stop") raise(SIGSTOP);
        _exit(9);
      }
      for (int step = 1; step < 1000; ++step) allreduceStep(step);
    } else if (scenario == "kill-in-set") {
      // Ranks 0 and 1 run large allreduces in a set of their own, and rank
      // 1 is killed in one: rank 0 fails in that set's connections while
      // the others wait for it in set 0's negotiation.
      const int pair = kolo::defaultEngine().addProcessSet({0, 1});
      if (kolo::rank() < 2) {
        if (kolo::rank() == 1) {
          std::thread([] {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            raise(SIGKILL);
          }).detach();
        }
        largeAllreducesUntilError(pair, 2);
      } else {
        allreduceStep(0);  // ranks 0 and 1 never join it: it fails with them
      }
    } else if (scenario == "exit-without-shutdown") {
      // Returns from main with the engine up: the atexit hook shuts it down.
      allreduceStep(0);
      std::printf("OK\n");
      std::fflush(stdout);
      return 0;
    } else if (scenario == "exit-hung-callback") {
      // A completion callback that never returns holds the engine's thread:
      // the atexit hook gives up after KOLO_TIMEOUT and ends the process.
      allreduceStep(0);
      static std::vector<float> v(4, 1.0f);
      kolo::Request q;
      q.name = "hung";
      q.shape = {4};
      kolo::Entry e;
      e.input = v.data();
      e.output = v.data();
      e.onDone = [](const kolo::Status&) { std::this_thread::sleep_for(std::chrono::hours(1)); };
      kolo::defaultEngine().enqueue(q, e);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::printf("RETURNING\n");
      std::fflush(stdout);
      return 0;
    } else if (scenario == "kill-mid" || scenario == "stop-mid") {
      // Under kolorun: the first failed rank makes it SIGTERM the others;
      // a survivor still reports its own error (kolorun's grace period).
      signal(SIGTERM, SIG_IGN);
      allreduceStep(0);
      if (kolo::rank() == 1) {
        const int sig = scenario == "kill-mid" ? SIGKILL : SIGSTOP;
        std::thread([sig] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          raise(sig);
        }).detach();
      }
      largeAllreducesUntilError();
    }
    kolo::shutdown();
    std::printf("OK\n");
    return 0;
  } catch (const std::exception& e) {
    std::printf("ERROR: %s\n", e.what());
    std::fflush(stdout);
    return 3;
  }
}
