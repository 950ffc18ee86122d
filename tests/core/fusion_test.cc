#include <gtest/gtest.h>

#include "execution/fusion.h"
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

}  // namespace
}  // namespace kolo
