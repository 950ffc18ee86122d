#include <gtest/gtest.h>

#include <random>

#include "kolo/error.h"
#include "wire/wire.h"

namespace kolo {
namespace {

RequestList sampleRequests() {
  RequestList list;
  list.rank = 1;
  RequestMsg m;
  m.request.name = "layer1.weight";
  m.request.op = OpType::kAlltoall;
  m.request.dtype = DataType::kBFloat16;
  m.request.shape = {4, 3};
  m.request.splits = {1, 3};
  m.request.prescale = 0.25;
  m.request.recvSplits = {2, 2};
  m.request.call = "all_to_all_single";
  m.group = "g";
  m.groupSize = 2;
  list.requests.push_back(m);
  m.request.name = "b";
  m.request.op = OpType::kAllreduce;
  m.request.splits.clear();
  m.request.recvSplits.clear();
  m.request.call.clear();
  list.requests.push_back(m);
  return list;
}

ResponseList sampleResponses() {
  ResponseList list;
  Response r;
  r.op = OpType::kAllgather;
  r.names = {"a", "b"};
  r.shapes = {{2, 2}, {3}};
  r.rankDims = {1, 1, 2, 1};
  list.responses.push_back(r);
  Response e;
  e.kind = ResponseKind::kError;
  e.names = {"c"};
  e.error = "ranks disagree";
  list.responses.push_back(e);
  return list;
}

TEST(Wire, ProcessSetChangesRoundTripAndAreChecked) {
  RequestList list;
  RequestMsg m;
  m.request.name = "kolo.process_set.0";
  m.request.op = OpType::kProcessSet;
  m.setChange.ranks = {0, 2};
  list.requests.push_back(m);
  m.request.name = "kolo.process_set.1";
  m.setChange = ProcessSetChange{};
  m.setChange.removeId = 3;
  list.requests.push_back(m);
  auto back = wire::decodeRequestList(wire::encode(list), 3);
  ASSERT_EQ(back.requests.size(), 2u);
  EXPECT_EQ(back.requests[0].request.op, OpType::kProcessSet);
  EXPECT_EQ(back.requests[0].setChange.ranks, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(back.requests[0].setChange.removeId, -1);
  EXPECT_EQ(back.requests[1].setChange.removeId, 3);
  EXPECT_TRUE(back.requests[1].setChange.ranks.empty());
  ResponseList responses;
  Response r;
  r.op = OpType::kProcessSet;
  r.names = {"kolo.process_set.0"};
  r.shapes = {{}};
  r.setChange.ranks = {1, 2};
  responses.responses.push_back(r);
  EXPECT_EQ(wire::decodeResponseList(wire::encode(responses), 3).responses[0].setChange.ranks,
            (std::vector<int32_t>{1, 2}));
  // Ranks outside the job, or not ascending, are malformed.
  EXPECT_THROW(wire::decodeResponseList(wire::encode(responses), 2), Internal);
  responses.responses[0].setChange.ranks = {2, 1};
  EXPECT_THROW(wire::decodeResponseList(wire::encode(responses), 3), Internal);
}

TEST(Wire, LocalProcessSetChangesRoundTripAndAreChecked) {
  RequestList list;
  RequestMsg m;
  m.request.name = "kolo.local_set.pipeline";
  m.request.op = OpType::kProcessSet;
  m.setChange.ranks = {1, 2};
  m.setChange.localKey = "pipeline";
  list.requests.push_back(m);
  m.request.name = "kolo.local_set_removal.pipeline";
  m.setChange.localRemove = true;
  list.requests.push_back(m);
  auto back = wire::decodeRequestList(wire::encode(list), 3);
  ASSERT_EQ(back.requests.size(), 2u);
  EXPECT_EQ(back.requests[0].setChange.localKey, "pipeline");
  EXPECT_FALSE(back.requests[0].setChange.localRemove);
  EXPECT_TRUE(back.requests[1].setChange.localRemove);
  EXPECT_EQ(back.requests[1].setChange.ranks, (std::vector<int32_t>{1, 2}));
  ResponseList responses;
  Response r;
  r.op = OpType::kProcessSet;
  r.names = {"kolo.local_set.pipeline"};
  r.shapes = {{}};
  r.setChange = m.setChange;
  responses.responses.push_back(r);
  const Response got = wire::decodeResponseList(wire::encode(responses), 3).responses[0];
  EXPECT_EQ(got.setChange, m.setChange);
  // A pair's request to connect (point-to-point) travels too.
  responses.responses[0].setChange.localRemove = false;
  responses.responses[0].setChange.pairRequest = true;
  EXPECT_TRUE(
      wire::decodeResponseList(wire::encode(responses), 3).responses[0].setChange.pairRequest);
  responses.responses[0].setChange.pairRequest = false;
  // A local change names its members; a removal without a key is malformed.
  responses.responses[0].setChange.ranks.clear();
  EXPECT_THROW(wire::decodeResponseList(wire::encode(responses), 3), Internal);
  responses.responses[0].setChange = ProcessSetChange{};
  responses.responses[0].setChange.localRemove = true;
  EXPECT_THROW(wire::decodeResponseList(wire::encode(responses), 3), Internal);
}

TEST(Wire, RoundTrips) {
  auto req = wire::decodeRequestList(wire::encode(sampleRequests()), 2);
  ASSERT_EQ(req.requests.size(), 2u);
  EXPECT_EQ(req.rank, 1);
  EXPECT_EQ(req.requests[0].request.name, "layer1.weight");
  EXPECT_EQ(req.requests[0].request.dtype, DataType::kBFloat16);
  EXPECT_EQ(req.requests[0].request.splits, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(req.requests[0].request.prescale, 0.25);
  EXPECT_EQ(req.requests[0].request.recvSplits, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(req.requests[0].request.call, "all_to_all_single");
  EXPECT_TRUE(req.requests[1].request.call.empty());
  EXPECT_EQ(req.requests[1].groupSize, 2);
  auto resp = wire::decodeResponseList(wire::encode(sampleResponses()), 2);
  ASSERT_EQ(resp.responses.size(), 2u);
  EXPECT_EQ(resp.responses[0].rankDims, (std::vector<int64_t>{1, 1, 2, 1}));
  EXPECT_EQ(resp.responses[1].error, "ranks disagree");
}

TEST(Wire, RejectsOutOfRangeValues) {
  RequestList bad = sampleRequests();
  bad.rank = 7;
  EXPECT_THROW(wire::decodeRequestList(wire::encode(bad), 2), Internal);
  bad = sampleRequests();
  bad.requests[0].request.shape = {-3};
  EXPECT_THROW(wire::decodeRequestList(wire::encode(bad), 2), Internal);
  bad = sampleRequests();
  bad.requests[0].request.splits = {1, 1, 2};
  EXPECT_THROW(wire::decodeRequestList(wire::encode(bad), 2), Internal);
  bad = sampleRequests();
  bad.requests[0].request.recvSplits = {4};
  EXPECT_THROW(wire::decodeRequestList(wire::encode(bad), 2), Internal);
  bad = sampleRequests();
  bad.requests[0].request.recvSplits = {5, -1};
  EXPECT_THROW(wire::decodeRequestList(wire::encode(bad), 2), Internal);
  ResponseList badResp = sampleResponses();
  badResp.responses[0].rankDims = {1};
  EXPECT_THROW(wire::decodeResponseList(wire::encode(badResp), 2), Internal);
}

TEST(Wire, TruncatedAndGarbledBytesAreErrorsNotCrashes) {
  auto good = wire::encode(sampleRequests());
  for (size_t len = 0; len < good.size(); ++len) {
    std::vector<char> cut(good.begin(), good.begin() + static_cast<long>(len));
    try {
      wire::decodeRequestList(cut, 2);
    } catch (const Internal&) {
    }
  }
  std::mt19937 rng(42);
  auto goodResp = wire::encode(sampleResponses());
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto bytes = trial % 2 ? good : goodResp;
    for (int flips = 0; flips < 1 + trial % 4; ++flips) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    try {
      if (trial % 2) {
        wire::decodeRequestList(bytes, 2);
      } else {
        wire::decodeResponseList(bytes, 2);
      }
    } catch (const Internal& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find("malformed"), std::string::npos);
    }
  }
  EXPECT_GT(rejected, 100);
  EXPECT_THROW(wire::decodeRequestList(std::vector<char>(3, 'x'), 2), Internal);
}

}  // namespace
}  // namespace kolo
