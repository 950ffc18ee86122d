// Writes the seed corpora for the fuzzers: a few valid messages per target.
//   fuzz_make_corpus <fuzz/corpus>
// The output is committed; rerun only when the wire formats change.
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "wire/message.h"
#include "rendezvous/protocol.h"
#include "wire/wire.h"

namespace {

using kolo::rendezvous::Command;
using kolo::rendezvous::Reply;
using kolo::rendezvous::Writer;

void write(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

// Frame = u32 big-endian length + payload, as writeFrame sends it.
std::vector<char> frames(const std::vector<std::vector<char>>& payloads) {
  Writer w;
  for (const auto& p : payloads) w.bytes(p);
  return w.take();
}

kolo::RequestMsg request(const std::string& name, kolo::OpType op, kolo::DataType dtype,
                         std::vector<int64_t> shape) {
  kolo::RequestMsg m;
  m.request.name = name;
  m.request.op = op;
  m.request.dtype = dtype;
  m.request.shape = std::move(shape);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_corpus <corpus dir>\n";
    return 2;
  }
  const std::string dir = argv[1];
  using kolo::DataType;
  using kolo::OpType;

  kolo::RequestList empty;
  write(dir + "/fuzz_wire_requests/empty", kolo::wire::encode(empty));
  kolo::RequestList mixed;
  mixed.rank = 2;
  mixed.requests.push_back(request("grad.w", OpType::kAllreduce, DataType::kFloat32, {4, 3}));
  auto bcast = request("bcast", OpType::kBroadcast, DataType::kInt64, {7});
  bcast.request.root = 3;
  mixed.requests.push_back(bcast);
  auto a2a = request("a2a", OpType::kAlltoall, DataType::kFloat16, {4, 2});
  a2a.request.splits = {1, 1, 1, 1};
  mixed.requests.push_back(a2a);
  auto grouped = request("g0", OpType::kAllreduce, DataType::kBFloat16, {5});
  grouped.group = "grp";
  grouped.groupSize = 2;
  grouped.request.reduceOp = kolo::ReduceOp::kAverage;
  grouped.request.prescale = 0.5;
  mixed.requests.push_back(grouped);
  write(dir + "/fuzz_wire_requests/mixed", kolo::wire::encode(mixed));

  kolo::ResponseList ok;
  kolo::Response fused;
  fused.op = OpType::kAllreduce;
  fused.names = {"a", "b"};
  fused.shapes = {{2, 2}, {3}};
  ok.responses.push_back(fused);
  kolo::Response gather;
  gather.op = OpType::kAllgather;
  gather.dtype = DataType::kInt8;
  gather.names = {"g"};
  gather.shapes = {{1, 3}};
  gather.rankDims = {1, 0, 2, 1};
  ok.responses.push_back(gather);
  write(dir + "/fuzz_wire_responses/ok", kolo::wire::encode(ok));
  kolo::ResponseList control;
  kolo::Response error;
  error.kind = kolo::ResponseKind::kError;
  error.names = {"x"};
  error.shapes = {{1}};
  error.error = "mismatched dtype";
  control.responses.push_back(error);
  kolo::Response ack;
  ack.kind = kolo::ResponseKind::kJoinAck;
  ack.rankArg = 1;
  control.responses.push_back(ack);
  kolo::Response done;
  done.kind = kolo::ResponseKind::kJoinDone;
  done.rankArg = 3;
  control.responses.push_back(done);
  write(dir + "/fuzz_wire_responses/control", kolo::wire::encode(control));

  auto cmd = [](Command c) { return Writer().u8(static_cast<uint8_t>(c)); };
  write(dir + "/fuzz_store_frames/requests",
        frames({cmd(Command::kSet).bytes(std::string("rank/0")).bytes(std::string("addr")).take(),
                cmd(Command::kGet).bytes(std::string("rank/0")).u64(1000).take(),
                cmd(Command::kWait).u32(2).bytes(std::string("a")).bytes(std::string("b"))
                    .u64(500).take(),
                cmd(Command::kAdd).bytes(std::string("counter")).i64(-3).take(),
                cmd(Command::kCheck).bytes(std::string("a")).take()}));
  write(dir + "/fuzz_store_frames/replies",
        frames({Writer().u8(static_cast<uint8_t>(Reply::kOk)).bytes(std::string("v")).take(),
                Writer().u8(static_cast<uint8_t>(Reply::kOk)).i64(7).take(),
                Writer().u8(static_cast<uint8_t>(Reply::kOk)).u8(1).take(),
                Writer().u8(static_cast<uint8_t>(Reply::kTimeout))
                    .bytes(std::string("timed out")).take(),
                Writer().u8(static_cast<uint8_t>(Reply::kError)).u8(1)
                    .bytes(std::string("bad")).take()}));
  return 0;
}
