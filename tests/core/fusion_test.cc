#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

#include "negotiation/fusion.h"
#include "comm/layout.h"
#include "kolo/config.h"
#include "negotiation/message_table.h"
#include "negotiation/response_cache.h"

namespace kolo {
namespace {

Response allreduce(const std::string& name, int64_t n, DataType dtype = DataType::kFloat32) {
  Response r;
  r.op = OpType::kAllreduce;
  r.dtype = dtype;
  r.names = {name};
  r.shapes = {{n}};
  return r;
}

TEST(FuseResponses, MergesCompatibleUpToThreshold) {
  std::vector<Response> in = {allreduce("a", 10), allreduce("b", 10), allreduce("c", 10),
                              allreduce("d", 5, DataType::kFloat64), allreduce("e", 10)};
  auto out = fuseResponses(in, 80);  // 20 floats fit
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(out[1].names, (std::vector<std::string>{"c", "e"}));
  EXPECT_EQ(out[2].names, (std::vector<std::string>{"d"}));
  EXPECT_EQ(fuseResponses(in, 0).size(), 5u);
}

TEST(FuseResponses, LargeTensorsStayAloneAndDoNotCloseTheOpenBuffer) {
  const int64_t big = kUnfusedTensorBytes / 4;  // float32 elements
  std::vector<Response> in = {allreduce("a", 10), allreduce("big", big), allreduce("b", 10),
                              allreduce("bigger", 2 * big)};
  auto out = fuseResponses(in, 64 * kUnfusedTensorBytes);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(out[1].names, (std::vector<std::string>{"big"}));
  EXPECT_EQ(out[2].names, (std::vector<std::string>{"bigger"}));
  // Just below the limit still fuses.
  in = {allreduce("c", big - 1), allreduce("d", 10)};
  EXPECT_EQ(fuseResponses(in, 64 * kUnfusedTensorBytes).size(), 1u);
}

TEST(FuseResponses, FusingCachedResponsesInPlaceEqualsFusingCopies) {
  const int64_t big = kUnfusedTensorBytes / 4;
  std::vector<Response> in = {allreduce("a", 10), allreduce("b", 10),
                              allreduce("d", 5, DataType::kFloat64), allreduce("big", big),
                              allreduce("c", 10), allreduce("e", 10)};
  in[1].postscale = 0.5;  // a fusion key of its own
  Response bcast = allreduce("f", 3);
  bcast.op = OpType::kBroadcast;
  bcast.root = 1;
  in.push_back(bcast);
  std::vector<const Response*> view;
  for (const auto& r : in) view.push_back(&r);
  for (int64_t threshold : {int64_t{0}, int64_t{80}, 64 * kUnfusedTensorBytes}) {
    SCOPED_TRACE(threshold);
    auto moved = fuseResponses(in, threshold);
    auto copied = fuseResponses(view, threshold);
    ASSERT_EQ(copied.size(), moved.size());
    for (size_t i = 0; i < moved.size(); ++i) {
      EXPECT_EQ(copied[i].names, moved[i].names);
      EXPECT_EQ(copied[i].shapes, moved[i].shapes);
      EXPECT_EQ(copied[i].op, moved[i].op);
      EXPECT_EQ(copied[i].dtype, moved[i].dtype);
      EXPECT_EQ(copied[i].postscale, moved[i].postscale);
      EXPECT_EQ(copied[i].root, moved[i].root);
    }
  }
  EXPECT_EQ(fuseResponses(view, 64 * kUnfusedTensorBytes).size(), 5u);  // a+c+e, b, d, big, f
}

// ResNet-50's 161 gradients (name, shape) in the order of its parameters,
// from the benchmarks' shape file (written from the model definition by
// bench_model_shapes).
std::vector<std::pair<std::string, std::vector<int64_t>>> resnet50Gradients() {
  const std::string path = std::string(KOLO_SOURCE_DIR) + "/benchmarks/results/shapes-resnet50.csv";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  std::string line;
  std::getline(in, line);  // header: name,shape,numel
  while (std::getline(in, line)) {
    std::istringstream row(line);
    std::string name, dims, numel;
    std::getline(row, name, ',');
    std::getline(row, dims, ',');
    std::getline(row, numel, ',');
    std::vector<int64_t> shape;
    std::istringstream d(dims);
    for (std::string dim; std::getline(d, dim, 'x');) shape.push_back(std::stoll(dim));
    EXPECT_EQ(numElements(shape), std::stoll(numel)) << line;
    out.emplace_back(name, shape);
  }
  return out;
}

// One float32 allreduce response per ResNet-50 gradient on device, as the
// coordinator has them when a whole backward pass is ready at once.
std::vector<Response> resnet50Responses(DeviceKind device) {
  std::vector<Response> out;
  for (const auto& [name, shape] : resnet50Gradients()) {
    Response r = allreduce(name, 0);
    r.shapes = {shape};
    r.device = device;
    out.push_back(std::move(r));
  }
  return out;
}

int64_t bytesOf(const Response& r) {
  return r.totalElements() * static_cast<int64_t>(elementSize(r.dtype));
}

// The fused buffer of r as the executor lays it out.
int64_t layoutBytes(const Response& r) {
  std::vector<uint64_t> counts;
  for (const auto& s : r.shapes) counts.push_back(static_cast<uint64_t>(numElements(s)));
  const size_t es = elementSize(r.dtype);
  return static_cast<int64_t>(fusionLayout(counts, es, fusionAlignment(r.device)).total * es);
}

// Every name of in appears once in out, in the order of in.
void expectAllNamesInOrder(const std::vector<Response>& in, const std::vector<Response>& out) {
  std::vector<std::string> expected, got;
  for (const auto& r : in) expected.insert(expected.end(), r.names.begin(), r.names.end());
  for (const auto& r : out) got.insert(got.end(), r.names.begin(), r.names.end());
  std::sort(expected.begin(), expected.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expected);
}

TEST(FuseResponses, Resnet50OnGpuIsAHandfulOfResponsesAtDefaultSettings) {
  const auto in = resnet50Responses(DeviceKind::kCuda);
  ASSERT_EQ(in.size(), 161u);
  const int64_t total = std::accumulate(in.begin(), in.end(), int64_t{0},
                                        [](int64_t a, const Response& r) { return a + bytesOf(r); });
  int large = 0;
  for (const auto& r : in) large += bytesOf(r) >= kUnfusedTensorBytes;
  EXPECT_EQ(large, 29);  // 91 of its 97.5 MiB: these went alone before GPU fusion had its own rule
  EXPECT_GT(total, 97 << 20);

  const int64_t threshold = Config{}.fusionThresholdBytes;  // 128 MiB
  const auto out = fuseResponses(in, threshold);
  // All of it fits one buffer of the default threshold.
  EXPECT_EQ(out.size(), 1u);
  EXPECT_LE(out.size(), 5u) << "a ResNet-50 step on GPUs must be a handful of responses";
  expectAllNamesInOrder(in, out);
  for (const auto& r : out) EXPECT_LE(layoutBytes(r), threshold);

  // Smaller thresholds: as few responses as the threshold allows, each
  // within it (padding included), and large tensors fuse too.
  for (int64_t mib : {8, 32, 64}) {
    SCOPED_TRACE(mib);
    const auto part = fuseResponses(in, mib << 20);
    EXPECT_LE(static_cast<int64_t>(part.size()), 2 * (total / (mib << 20) + 1));
    expectAllNamesInOrder(in, part);
    size_t withLarge = 0;
    for (const auto& r : part) {
      // A tensor over the threshold stays alone; everything else fits it.
      if (r.names.size() > 1) EXPECT_LE(layoutBytes(r), mib << 20);
      bool large = false, fused = r.names.size() > 1;
      for (const auto& s : r.shapes) {
        large = large || numElements(s) * 4 >= kUnfusedTensorBytes;
      }
      withLarge += large && fused;
    }
    EXPECT_GT(withLarge, 0u) << "no tensor of 1 MiB or more was fused";
  }
  // The pointer form (cached responses) agrees.
  std::vector<const Response*> view;
  for (const auto& r : in) view.push_back(&r);
  const auto cached = fuseResponses(view, threshold);
  ASSERT_EQ(cached.size(), out.size());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(cached[i].names, out[i].names);
}

TEST(FuseResponses, Resnet50OnCpuKeepsLargeTensorsAlone) {
  const auto in = resnet50Responses(DeviceKind::kCpu);
  ASSERT_EQ(in.size(), 161u);
  const auto out = fuseResponses(in, Config{}.fusionThresholdBytes);
  // The 29 tensors of 1 MiB or more alone and in place, the other 132 in
  // one buffer (it stays open across the large ones).
  ASSERT_EQ(out.size(), 30u);
  size_t fused = 0;
  for (const auto& r : out) {
    if (r.names.size() > 1) {
      ++fused;
      EXPECT_EQ(r.names.size(), 132u);
      for (const auto& s : r.shapes) EXPECT_LT(numElements(s) * 4, kUnfusedTensorBytes);
    } else {
      EXPECT_GE(bytesOf(r), kUnfusedTensorBytes) << r.names[0];
    }
  }
  EXPECT_EQ(fused, 1u);
  expectAllNamesInOrder(in, out);
}

TEST(FuseResponses, GpuFusionCountsPaddedBytesAgainstTheThreshold) {
  // Three 5-byte uint8 tensors take 16 bytes each in a CUDA buffer: two fit
  // 32 bytes, three do not. On the CPU they are dense: all three fit.
  auto make = [](DeviceKind device) {
    std::vector<Response> in;
    for (const char* name : {"a", "b", "c"}) {
      Response r = allreduce(name, 5, DataType::kUInt8);
      r.device = device;
      in.push_back(r);
    }
    return in;
  };
  auto gpu = fuseResponses(make(DeviceKind::kCuda), 32);
  ASSERT_EQ(gpu.size(), 2u);
  EXPECT_EQ(gpu[0].names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(gpu[1].names, (std::vector<std::string>{"c"}));
  EXPECT_EQ(fuseResponses(make(DeviceKind::kCpu), 32).size(), 1u);
}

TEST(FusionLayout, GpuOffsetsAre16ByteAlignedAndDeterministic) {
  const std::vector<uint64_t> counts = {3, 0, 5, 1, 64, 7};
  for (DataType dtype : {DataType::kUInt8, DataType::kFloat16, DataType::kBFloat16,
                         DataType::kFloat32, DataType::kInt32, DataType::kFloat64,
                         DataType::kInt64}) {
    SCOPED_TRACE(toString(dtype));
    const size_t es = elementSize(dtype);
    const FusionLayout a = fusionLayout(counts, es, fusionAlignment(DeviceKind::kCuda));
    ASSERT_EQ(a.offsets.size(), counts.size());
    uint64_t end = 0, padded = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      EXPECT_EQ(a.offsets[i] * es % kGpuFusionAlignBytes, 0u) << i;
      EXPECT_GE(a.offsets[i], end) << "tensor " << i << " overlaps the one before";
      // The first aligned place: less than one alignment step of gap.
      EXPECT_LT((a.offsets[i] - end) * es, kGpuFusionAlignBytes) << i;
      end = a.offsets[i] + counts[i];
      padded += fusedBytes(counts[i], es, kGpuFusionAlignBytes);
    }
    EXPECT_EQ(a.total, end);
    EXPECT_GE(padded, a.total * es);  // what the planner counts bounds the buffer
    // Same input, same layout (every rank computes it on its own).
    const FusionLayout b = fusionLayout(counts, es, kGpuFusionAlignBytes);
    EXPECT_EQ(a.offsets, b.offsets);
    EXPECT_EQ(a.total, b.total);
  }
  // float32 by hand: 3 -> [0,3), 0 -> 4, 5 -> [4,9), 1 -> [12,13), 64 -> [16,80), 7 -> [80,87).
  const FusionLayout f = fusionLayout(counts, 4, 16);
  EXPECT_EQ(f.offsets, (std::vector<uint64_t>{0, 4, 4, 12, 16, 80}));
  EXPECT_EQ(f.total, 87u);
}

TEST(FusionLayout, CpuStaysDense) {
  const std::vector<uint64_t> counts = {3, 0, 5, 1};
  EXPECT_EQ(fusionAlignment(DeviceKind::kCpu), 1u);
  const FusionLayout f = fusionLayout(counts, 4, fusionAlignment(DeviceKind::kCpu));
  EXPECT_EQ(f.offsets, (std::vector<uint64_t>{0, 3, 3, 8}));
  EXPECT_EQ(f.total, 9u);
  EXPECT_EQ(fusionLayout({}, 4, 16).total, 0u);
}

TEST(FusionLayout, RefusesAnAlignmentThatIsNoMultipleOfTheElement) {
  try {
    fusionLayout({1, 2}, 8, 12);
    FAIL() << "alignment 12 for 8-byte elements accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("alignment 12"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fusionLayout({1}, 4, 0), InvalidArgument);
}

TEST(ResponseCache, LruEvictionAndChangeDetection) {
  ResponseCache cache(2);
  int evicted = 0;
  int a = cache.put(allreduce("a", 4), &evicted);
  int b = cache.put(allreduce("b", 4), &evicted);
  EXPECT_EQ(evicted, -1);
  cache.touch(a);
  int c = cache.put(allreduce("c", 4), &evicted);
  EXPECT_EQ(evicted, b);
  EXPECT_EQ(c, b);
  Request q;
  q.name = "a";
  q.shape = {4};
  int bit = -1;
  EXPECT_EQ(cache.lookup(q, &bit), ResponseCache::Lookup::kHit);
  EXPECT_EQ(bit, a);
  q.shape = {5};
  EXPECT_EQ(cache.lookup(q, &bit), ResponseCache::Lookup::kChanged);
  q.name = "b";
  EXPECT_EQ(cache.lookup(q, &bit), ResponseCache::Lookup::kMiss);
}

TEST(MessageTable, ReadyOnlyWhenAllRanksSubmitAndReportsWaiters) {
  MessageTable table({0, 1, 2}, "");
  RequestMsg m;
  m.request.name = "x";
  m.request.shape = {2};
  table.add(0, m);
  table.add(2, m);
  EXPECT_TRUE(table.popReady().empty());
  auto waiting = table.waiting();
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].missingRanks, (std::vector<int>{1}));
  table.add(1, m);
  auto ready = table.popReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].kind, ResponseKind::kOk);
}

TEST(MessageTable, ALocalSetChangeIsReadyOnceItsMembersAloneSubmitted) {
  MessageTable table({0, 1, 2, 3}, "");
  RequestMsg m;
  m.request.name = "kolo.local_set.pair";
  m.request.op = OpType::kProcessSet;
  m.setChange.ranks = {1, 3};
  m.setChange.localKey = "pair";
  table.add(3, m);
  EXPECT_TRUE(table.popReady().empty());
  // Only member 1 is missing; ranks 0 and 2 are never waited for.
  auto waiting = table.waiting();
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].missingRanks, (std::vector<int>{1}));
  table.add(1, m);
  auto ready = table.popReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].kind, ResponseKind::kOk);
  EXPECT_EQ(ready[0].setChange.localKey, "pair");
  // Members that disagree on the ranks of one key: an error naming both.
  RequestMsg other = m;
  other.setChange.ranks = {1, 2, 3};
  table.add(1, m);
  table.add(3, other);
  ready = table.popReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].kind, ResponseKind::kError);
  EXPECT_NE(ready[0].error.find("local process set 'pair': its members disagree"),
            std::string::npos)
      << ready[0].error;
}

TEST(MessageTable, APointToPointMessageIsReadyOnceItsSenderSubmitted) {
  MessageTable table({4, 9}, "process set 'kolo.pair.4-9' (ranks 4,9)");
  RequestMsg m;
  m.request.name = wire::messageName(3, 0);
  m.request.op = OpType::kBroadcast;
  m.request.root = 1;
  m.request.shape = {2};
  table.add(1, m);
  auto ready = table.popReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].kind, ResponseKind::kOk);
  EXPECT_EQ(ready[0].root, 1);
  EXPECT_TRUE(wire::isMessageName(ready[0].names[0]));
  EXPECT_EQ(wire::messageTag(ready[0].names[0]), 3);
  EXPECT_EQ(wire::messageSeq(wire::messageName(12, 345)), 345u);
}

}  // namespace
}  // namespace kolo
