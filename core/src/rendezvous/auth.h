// Mutual authentication of a TCP store connection (HMAC-SHA256 from
// libcrypto, never hand-written crypto).
//
//   server -> client  "kolo-store-v1" || sn                 (sn: 32 random bytes)
//   client -> server  cn || HMAC(secret, "kolo-store-v1 client" || sn || cn)
//   server -> client  u8 0 || HMAC(secret, "kolo-store-v1 server" || sn || cn)
//                  or u8 1 (refused) and the server closes the connection
//
// Each message is one frame (protocol.h). Fresh nonces on both sides make a
// recorded answer useless on another connection; the distinct labels keep a
// client's proof from being replayed as the server's. MACs are compared in
// constant time. The secret never leaves this file and is never logged.
#pragma once

#include <string>

#include "rendezvous/socket.h"

namespace kolo::rendezvous {

struct AuthResult {
  enum Kind {
    kOk,
    kRefused,     // server side: the client does not know the secret;
                  // client side: the server refused our secret
    kUnproven,    // client side: the server could not prove it knows it
    kFailed,      // I/O or protocol failure, timeout, or stop requested
  };
  Kind kind = kFailed;
  std::string reason;  // for logs and exceptions; empty when kOk
};

// Runs the server side on a freshly accepted connection. Bounded by
// kHandshakeTimeout; returns early (kFailed) when stopFd fires.
AuthResult authenticateClient(int fd, const std::string& secret, int stopFd);

// Runs the client side on a freshly connected socket; bounded by
// kHandshakeTimeout.
AuthResult authenticateServer(int fd, const std::string& secret);

}  // namespace kolo::rendezvous
