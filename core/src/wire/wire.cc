#include "wire/wire.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "kolo/error.h"
#include "messages_generated.h"

namespace kolo::wire {
namespace {

namespace fb = ::flatbuffers;
namespace gen = ::kolo::wirefb;
using Offsets = std::vector<fb::Offset<fb::String>>;

[[noreturn]] void malformed(const char* what, const std::string& why) {
  throw Internal(std::string("malformed ") + what + " message: " + why);
}

template <typename E>
E enumFrom(uint8_t v, uint8_t count, const char* what, const char* field) {
  if (v >= count) malformed(what, std::string(field) + " value " + std::to_string(v) + " out of range");
  return static_cast<E>(v);
}

// Copies bytes rather than reading through the vector: the verifier only
// checks 4-byte alignment, and a crafted message can misalign 8-byte data.
std::vector<int64_t> longs(const fb::Vector<int64_t>* v) {
  if (v == nullptr) return {};
  std::vector<int64_t> out(v->size());
  if (!out.empty()) std::memcpy(out.data(), v->Data(), out.size() * sizeof(int64_t));
  return out;
}

void checkDims(const std::vector<int64_t>& dims, const char* what) {
  if (dims.size() > 64) malformed(what, "more than 64 dimensions");
  for (int64_t d : dims) {
    if (d < 0) malformed(what, "negative dimension " + std::to_string(d));
  }
}

void checkScale(double s, const char* what) {
  if (!std::isfinite(s)) malformed(what, "non-finite scale factor");
}

// A process set change: ascending ranks of the job, or one id to remove.
ProcessSetChange setChangeOf(const fb::Vector<int32_t>* ranks, int32_t removeId,
                             const fb::String* localKey, bool localRemove, bool pairRequest,
                             int worldSize, const char* what) {
  ProcessSetChange c;
  if (ranks != nullptr) {
    c.ranks.resize(ranks->size());
    if (!c.ranks.empty()) std::memcpy(c.ranks.data(), ranks->Data(), c.ranks.size() * 4);
  }
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    if (c.ranks[i] < 0 || c.ranks[i] >= worldSize || (i > 0 && c.ranks[i] <= c.ranks[i - 1])) {
      malformed(what, "process set ranks not ascending ranks of the job");
    }
  }
  c.removeId = removeId;
  if (c.removeId < -1) malformed(what, "negative process set id");
  c.localKey = localKey ? localKey->str() : "";
  c.localRemove = localRemove;
  c.pairRequest = pairRequest;
  if (c.pairRequest && (!c.local() || c.ranks.size() != 2)) {
    malformed(what, "pair request without a pair");
  }
  if (c.local() && c.ranks.empty()) malformed(what, "local process set change without ranks");
  if (c.localRemove && !c.local()) malformed(what, "local process set removal without a key");
  return c;
}

}  // namespace

std::vector<char> encode(const RequestList& list) {
  fb::FlatBufferBuilder b(256);
  std::vector<fb::Offset<gen::Request>> reqs;
  reqs.reserve(list.requests.size());
  for (const auto& m : list.requests) {
    const kolo::Request& r = m.request;
    auto name = b.CreateString(r.name);
    auto shape = b.CreateVector(r.shape);
    auto splits = b.CreateVector(r.splits);
    auto group = b.CreateString(m.group);
    auto setRanks = b.CreateVector(m.setChange.ranks);
    auto recvSplits = b.CreateVector(r.recvSplits);
    auto call = b.CreateString(r.call);
    auto setKey = b.CreateString(m.setChange.localKey);
    gen::RequestBuilder rb(b);
    rb.add_name(name);
    rb.add_op(static_cast<uint8_t>(r.op));
    rb.add_dtype(static_cast<uint8_t>(r.dtype));
    rb.add_shape(shape);
    rb.add_device(static_cast<uint8_t>(r.device));
    rb.add_device_index(r.deviceIndex);
    rb.add_reduce_op(static_cast<uint8_t>(r.reduceOp));
    rb.add_prescale(r.prescale);
    rb.add_postscale(r.postscale);
    rb.add_root(r.root);
    rb.add_splits(splits);
    rb.add_group(group);
    rb.add_group_size(m.groupSize);
    rb.add_set_ranks(setRanks);
    rb.add_set_remove(m.setChange.removeId);
    rb.add_recv_splits(recvSplits);
    rb.add_call(call);
    rb.add_set_key(setKey);
    rb.add_set_local_remove(m.setChange.localRemove);
    rb.add_set_pair_request(m.setChange.pairRequest);
    reqs.push_back(rb.Finish());
  }
  auto vec = b.CreateVector(reqs);
  b.Finish(gen::CreateRequestList(b, kVersion, list.rank, vec));
  const char* p = reinterpret_cast<const char*>(b.GetBufferPointer());
  return std::vector<char>(p, p + b.GetSize());
}

std::vector<char> encode(const ResponseList& list) {
  fb::FlatBufferBuilder b(256);
  std::vector<fb::Offset<gen::Response>> resps;
  resps.reserve(list.responses.size());
  for (const auto& r : list.responses) {
    Offsets names;
    names.reserve(r.names.size());
    for (const auto& n : r.names) names.push_back(b.CreateString(n));
    std::vector<fb::Offset<gen::Dims>> shapes;
    shapes.reserve(r.shapes.size());
    for (const auto& s : r.shapes) shapes.push_back(gen::CreateDims(b, b.CreateVector(s)));
    auto namesV = b.CreateVector(names);
    auto shapesV = b.CreateVector(shapes);
    auto rankDims = b.CreateVector(r.rankDims);
    auto error = b.CreateString(r.error);
    auto setRanks = b.CreateVector(r.setChange.ranks);
    auto setKey = b.CreateString(r.setChange.localKey);
    gen::ResponseBuilder rb(b);
    rb.add_kind(static_cast<uint8_t>(r.kind));
    rb.add_op(static_cast<uint8_t>(r.op));
    rb.add_dtype(static_cast<uint8_t>(r.dtype));
    rb.add_device(static_cast<uint8_t>(r.device));
    rb.add_reduce_op(static_cast<uint8_t>(r.reduceOp));
    rb.add_prescale(r.prescale);
    rb.add_postscale(r.postscale);
    rb.add_root(r.root);
    rb.add_names(namesV);
    rb.add_shapes(shapesV);
    rb.add_rank_dims(rankDims);
    rb.add_error(error);
    rb.add_rank_arg(r.rankArg);
    rb.add_set_ranks(setRanks);
    rb.add_set_remove(r.setChange.removeId);
    rb.add_set_key(setKey);
    rb.add_set_local_remove(r.setChange.localRemove);
    rb.add_set_pair_request(r.setChange.pairRequest);
    resps.push_back(rb.Finish());
  }
  auto vec = b.CreateVector(resps);
  b.Finish(gen::CreateResponseList(b, kVersion, vec));
  const char* p = reinterpret_cast<const char*>(b.GetBufferPointer());
  return std::vector<char>(p, p + b.GetSize());
}

RequestList decodeRequestList(const std::vector<char>& bytes, int worldSize) {
  const char* what = "request list";
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  fb::Verifier verifier(data, bytes.size(), /*max_depth=*/16, /*max_tables=*/1000000);
  if (bytes.size() < 8 || !verifier.VerifyBuffer<gen::RequestList>(nullptr)) {
    malformed(what, "failed verification (" + std::to_string(bytes.size()) + " bytes)");
  }
  const auto* msg = fb::GetRoot<gen::RequestList>(data);
  if (msg->version() != kVersion) {
    malformed(what, "version " + std::to_string(msg->version()) + ", expected " +
                        std::to_string(kVersion) + " (are all ranks running the same kolo?)");
  }
  kolo::RequestList out;
  out.rank = msg->rank();
  if (out.rank < 0 || out.rank >= worldSize) malformed(what, "rank out of range");
  if (msg->requests() == nullptr) return out;
  for (const auto* r : *msg->requests()) {
    if (r->name() == nullptr || r->name()->size() == 0) malformed(what, "request without a name");
    RequestMsg m;
    kolo::Request& q = m.request;
    q.name = r->name()->str();
    q.op = enumFrom<OpType>(r->op(), kNumOpTypes, what, "op");
    q.dtype = enumFrom<DataType>(r->dtype(), kNumDataTypes, what, "dtype");
    q.shape = longs(r->shape());
    checkDims(q.shape, what);
    q.device = enumFrom<DeviceKind>(r->device(), 2, what, "device");
    q.deviceIndex = r->device_index();
    q.reduceOp = enumFrom<ReduceOp>(r->reduce_op(), kNumReduceOps, what, "reduce op");
    q.prescale = r->prescale();
    q.postscale = r->postscale();
    checkScale(q.prescale, what);
    checkScale(q.postscale, what);
    q.root = r->root();
    q.splits = longs(r->splits());
    if (!q.splits.empty() && q.splits.size() != static_cast<size_t>(worldSize)) {
      malformed(what, "splits has " + std::to_string(q.splits.size()) + " entries for " +
                          std::to_string(worldSize) + " ranks");
    }
    checkDims(q.splits, what);
    q.recvSplits = longs(r->recv_splits());
    if (!q.recvSplits.empty() && q.recvSplits.size() != static_cast<size_t>(worldSize)) {
      malformed(what, "receive splits have " + std::to_string(q.recvSplits.size()) +
                          " entries for " + std::to_string(worldSize) + " ranks");
    }
    checkDims(q.recvSplits, what);
    q.call = r->call() ? r->call()->str() : "";
    m.group = r->group() ? r->group()->str() : "";
    m.groupSize = r->group_size();
    if (m.groupSize < 0) malformed(what, "negative group size");
    m.setChange = setChangeOf(r->set_ranks(), r->set_remove(), r->set_key(), r->set_local_remove(),
                              r->set_pair_request(), worldSize, what);
    out.requests.push_back(std::move(m));
  }
  return out;
}

ResponseList decodeResponseList(const std::vector<char>& bytes, int worldSize) {
  const char* what = "response list";
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  fb::Verifier verifier(data, bytes.size(), 16, 1000000);
  if (bytes.size() < 8 || !verifier.VerifyBuffer<gen::ResponseList>(nullptr)) {
    malformed(what, "failed verification (" + std::to_string(bytes.size()) + " bytes)");
  }
  const auto* msg = fb::GetRoot<gen::ResponseList>(data);
  if (msg->version() != kVersion) malformed(what, "version mismatch");
  kolo::ResponseList out;
  if (msg->responses() == nullptr) return out;
  for (const auto* r : *msg->responses()) {
    kolo::Response p;
    p.kind = enumFrom<ResponseKind>(r->kind(), 4, what, "kind");
    p.op = enumFrom<OpType>(r->op(), kNumOpTypes, what, "op");
    p.dtype = enumFrom<DataType>(r->dtype(), kNumDataTypes, what, "dtype");
    p.device = enumFrom<DeviceKind>(r->device(), 2, what, "device");
    p.reduceOp = enumFrom<ReduceOp>(r->reduce_op(), kNumReduceOps, what, "reduce op");
    p.prescale = r->prescale();
    p.postscale = r->postscale();
    checkScale(p.prescale, what);
    checkScale(p.postscale, what);
    p.root = r->root();
    if (r->names()) {
      for (const auto* n : *r->names()) p.names.push_back(n->str());
    }
    if (r->shapes()) {
      for (const auto* s : *r->shapes()) {
        p.shapes.push_back(longs(s->values()));
        checkDims(p.shapes.back(), what);
      }
    }
    p.rankDims = longs(r->rank_dims());
    checkDims(p.rankDims, what);
    p.error = r->error() ? r->error()->str() : "";
    p.rankArg = r->rank_arg();
    p.setChange = setChangeOf(r->set_ranks(), r->set_remove(), r->set_key(), r->set_local_remove(),
                              r->set_pair_request(), worldSize, what);
    if (p.kind == ResponseKind::kOk) {
      if (p.names.empty()) malformed(what, "response without tensors");
      if (p.shapes.size() != p.names.size()) malformed(what, "shapes do not match names");
      if (p.root < 0 || p.root >= worldSize) malformed(what, "root out of range");
      size_t expect = 0;
      if (p.op == OpType::kAllgather) expect = p.names.size() * worldSize;
      if (p.op == OpType::kAlltoall) expect = static_cast<size_t>(worldSize) * worldSize;
      if (p.rankDims.size() != expect) malformed(what, "per-rank dimensions have the wrong length");
    }
    if ((p.kind == ResponseKind::kJoinAck || p.kind == ResponseKind::kJoinDone) &&
        (p.rankArg < 0 || p.rankArg >= worldSize)) {
      malformed(what, "join rank out of range");
    }
    out.responses.push_back(std::move(p));
  }
  return out;
}

}  // namespace kolo::wire
