#include "rendezvous/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "kolo/error.h"
#include "rendezvous/protocol.h"

namespace kolo::rendezvous {
namespace {

constexpr size_t kNonceSize = 32;
constexpr size_t kMacSize = 32;  // SHA-256
constexpr uint32_t kMaxHandshakeFrame = 256;
constexpr char kMagic[] = "kolo-store-v1";
constexpr size_t kMagicSize = sizeof(kMagic) - 1;
constexpr char kClientLabel[] = "kolo-store-v1 client";
constexpr char kServerLabel[] = "kolo-store-v1 server";
constexpr uint8_t kAccepted = 0;
constexpr uint8_t kRejected = 1;

using Nonce = std::array<unsigned char, kNonceSize>;
using Mac = std::array<unsigned char, kMacSize>;

Nonce randomNonce() {
  Nonce nonce;
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    throw Internal("rendezvous store: RAND_bytes failed to produce a nonce");
  }
  return nonce;
}

// HMAC-SHA256(secret, label || serverNonce || clientNonce).
Mac proof(const std::string& secret, const char* label, const Nonce& serverNonce,
          const Nonce& clientNonce) {
  std::vector<unsigned char> message(label, label + std::strlen(label));
  message.insert(message.end(), serverNonce.begin(), serverNonce.end());
  message.insert(message.end(), clientNonce.begin(), clientNonce.end());
  Mac mac;
  unsigned int macLen = 0;
  // secret.data() is never null, so an empty secret is a valid empty key.
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), message.data(),
           message.size(), mac.data(), &macLen) == nullptr ||
      macLen != kMacSize) {
    throw Internal("rendezvous store: HMAC-SHA256 failed");
  }
  return mac;
}

bool sameMac(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), kMacSize) == 0;
}

AuthResult failed(const std::string& step, IoResult io) {
  return {AuthResult::kFailed, step + ": " + describe(io)};
}

}  // namespace

AuthResult authenticateClient(int fd, const std::string& secret, int stopFd) {
  Deadline deadline = Clock::now() + kHandshakeTimeout;
  Nonce serverNonce = randomNonce();
  Writer hello;
  hello.raw(kMagic, kMagicSize).raw(serverNonce.data(), serverNonce.size());
  IoResult io = writeFrame(fd, hello.data(), deadline, stopFd);
  if (io != IoResult::kOk) return failed("sending challenge", io);

  std::vector<char> answer;
  io = readFrame(fd, &answer, kMaxHandshakeFrame, deadline, stopFd);
  if (io == IoResult::kTimeout) {
    return {AuthResult::kFailed, "no authentication answer within " +
                                     std::to_string(kHandshakeTimeout.count()) + " s"};
  }
  if (io != IoResult::kOk) return failed("reading authentication answer", io);
  if (answer.size() != kNonceSize + kMacSize) {
    return {AuthResult::kFailed, "malformed authentication answer (" +
                                     std::to_string(answer.size()) + " bytes)"};
  }
  Nonce clientNonce;
  Mac clientMac;
  Reader reader(answer);
  reader.raw(clientNonce.data(), clientNonce.size());
  reader.raw(clientMac.data(), clientMac.size());

  if (!sameMac(clientMac, proof(secret, kClientLabel, serverNonce, clientNonce))) {
    Writer refusal;
    refusal.u8(kRejected);
    // Best effort and short: the client gets a clear reason, then we close.
    writeFrame(fd, refusal.data(), std::min(deadline, Clock::now() + std::chrono::seconds(1)),
               stopFd);
    return {AuthResult::kRefused, "authentication failed"};
  }
  Mac serverMac = proof(secret, kServerLabel, serverNonce, clientNonce);
  Writer accept;
  accept.u8(kAccepted).raw(serverMac.data(), serverMac.size());
  io = writeFrame(fd, accept.data(), deadline, stopFd);
  if (io != IoResult::kOk) return failed("sending authentication proof", io);
  return {AuthResult::kOk, ""};
}

AuthResult authenticateServer(int fd, const std::string& secret) {
  Deadline deadline = Clock::now() + kHandshakeTimeout;
  std::vector<char> hello;
  IoResult io = readFrame(fd, &hello, kMaxHandshakeFrame, deadline);
  if (io != IoResult::kOk) return failed("waiting for the server's challenge", io);
  if (hello.size() != kMagicSize + kNonceSize ||
      std::memcmp(hello.data(), kMagic, kMagicSize) != 0) {
    return {AuthResult::kFailed,
            "the server did not greet like a kolo store (kolo-store-v1); is "
            "another program or another kolo version listening on that port?"};
  }
  Nonce serverNonce;
  std::memcpy(serverNonce.data(), hello.data() + kMagicSize, kNonceSize);
  Nonce clientNonce = randomNonce();
  Mac clientMac = proof(secret, kClientLabel, serverNonce, clientNonce);
  Writer answer;
  answer.raw(clientNonce.data(), clientNonce.size()).raw(clientMac.data(), clientMac.size());
  io = writeFrame(fd, answer.data(), deadline);
  if (io != IoResult::kOk) return failed("sending our authentication answer", io);

  std::vector<char> verdict;
  io = readFrame(fd, &verdict, kMaxHandshakeFrame, deadline);
  if (io != IoResult::kOk) return failed("waiting for the server's verdict", io);
  if (verdict.size() == 1 && static_cast<uint8_t>(verdict[0]) == kRejected) {
    return {AuthResult::kRefused, "refused our secret"};
  }
  if (verdict.size() != 1 + kMacSize || static_cast<uint8_t>(verdict[0]) != kAccepted) {
    return {AuthResult::kFailed, "malformed authentication verdict"};
  }
  Mac serverMac;
  std::memcpy(serverMac.data(), verdict.data() + 1, kMacSize);
  if (!sameMac(serverMac, proof(secret, kServerLabel, serverNonce, clientNonce))) {
    return {AuthResult::kUnproven, "could not prove it knows our secret"};
  }
  return {AuthResult::kOk, ""};
}

}  // namespace kolo::rendezvous
