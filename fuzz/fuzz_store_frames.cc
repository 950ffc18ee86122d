// libFuzzer target: the TCP store's wire protocol (rendezvous/protocol.h).
// The input is a byte stream as a client (or server) would send it: it is
// written into one end of a socketpair and split into frames with
// readFrame; each payload is then decoded with Reader using the request
// grammar of TcpStoreServer and the reply grammar of TcpStoreClient.
// Contract: malformed bytes raise ProtocolError (or end the stream), never
// anything else.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "rendezvous/protocol.h"

namespace {

using kolo::rendezvous::Command;
using kolo::rendezvous::ProtocolError;
using kolo::rendezvous::Reader;
using kolo::rendezvous::Reply;

// Request grammar, as TcpStoreServer::Impl::handle reads it.
void parseRequest(const std::vector<char>& payload) {
  Reader in(payload);
  switch (static_cast<Command>(in.u8())) {
    case Command::kSet:
      in.string();
      in.bytes();
      break;
    case Command::kGet:
      in.string();
      in.u64();
      break;
    case Command::kWait: {
      uint32_t count = in.u32();
      if (count > payload.size()) throw ProtocolError("WAIT announces too many keys");
      for (uint32_t i = 0; i < count; ++i) in.string();
      in.u64();
      break;
    }
    case Command::kAdd:
      in.string();
      in.i64();
      break;
    case Command::kCheck:
      in.string();
      break;
    default:
      throw ProtocolError("unknown command");
  }
  in.expectEnd();
}

// Reply grammar, as TcpStoreClient reads it (the command picks the OK body).
void parseReply(const std::vector<char>& payload, int command) {
  Reader in(payload);
  auto status = static_cast<Reply>(in.u8());
  if (status == Reply::kOk) {
    switch (command % 4) {
      case 0: in.bytes(); break;  // GET
      case 1: in.i64(); break;    // ADD
      case 2: in.u8(); break;     // CHECK
      default: break;             // SET, WAIT
    }
  } else if (status == Reply::kError) {
    in.u8();
    in.string();
  } else if (status == Reply::kTimeout) {
    in.string();
  } else {
    throw ProtocolError("unknown reply status");
  }
  in.expectEnd();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A socket buffer holds this much without a reader; larger inputs add no
  // coverage.
  if (size > (32u << 10)) return 0;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::abort();
  size_t sent = 0;
  while (sent < size) {
    ssize_t n = ::send(fds[1], data + sent, size - sent, 0);
    if (n <= 0) std::abort();
    sent += static_cast<size_t>(n);
  }
  ::close(fds[1]);
  std::vector<char> payload;
  // The server's limit is kMaxFrameSize (64 MiB); a smaller one keeps the
  // fuzzer fast and exercises the same kTooLarge path.
  constexpr uint32_t kLimit = 1u << 20;
  for (int frame = 0;; ++frame) {
    auto io = kolo::rendezvous::readFrame(fds[0], &payload, kLimit, kolo::rendezvous::kNoDeadline);
    if (io != kolo::rendezvous::IoResult::kOk) break;
    try {
      parseRequest(payload);
    } catch (const ProtocolError&) {
    }
    try {
      parseReply(payload, frame);
    } catch (const ProtocolError&) {
    }
  }
  ::close(fds[0]);
  // Writer round trip: what Writer produces, Reader reads back.
  kolo::rendezvous::Writer w;
  w.u8(size > 0 ? data[0] : 0).bytes(reinterpret_cast<const char*>(data), size).u64(size);
  std::vector<char> encoded = w.take();
  Reader r(encoded);
  r.u8();
  if (r.bytes().size() != size || r.u64() != size) std::abort();
  r.expectEnd();
  return 0;
}
