#include "comm/gloo/context.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <thread>
#include <utility>

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include "comm/tcp/interfaces.h"
#include "rendezvous/arrival.h"
#include "kolo/error.h"

namespace kolo::comm::gloo {
namespace {

// Slot prefix of the handshake on a new pair; gloo's own algorithms use
// 0x01..0x08 and kolo's collectives 0x42 and 0x43.
constexpr uint8_t kHandshakeSlotPrefix = 0x44;

// A gloo context with no pairs until connectPeers() makes them.
class SparseContext final : public ::gloo::Context {
 public:
  SparseContext(int rank, int size, std::shared_ptr<::gloo::transport::Device> device,
                std::chrono::milliseconds timeout)
      : ::gloo::Context(rank, size) {
    device_ = std::move(device);
    transportContext_ = device_->createContext(rank, size);
    transportContext_->setTimeout(timeout);
    setTimeout(timeout);
  }
  std::shared_ptr<::gloo::transport::Context> transport() const { return transportContext_; }
};

bool mentionsTimeout(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return text.find("timed out") != std::string::npos || text.find("timeout") != std::string::npos;
}

std::shared_ptr<::gloo::transport::Device> createDevice(const BackendArgs& args) {
  ::gloo::transport::tcp::attr attr;
  if (!args.config.iface.empty()) {
    attr.iface = tcp::chooseInterface(args.config.iface).name;
  } else {
    attr.hostname = args.localAddress.empty() ? "127.0.0.1" : args.localAddress;
  }
  const std::string where = args.config.iface.empty()
                                ? "address '" + attr.hostname + "'"
                                : "interface '" + attr.iface + "' (KOLO_IFACE)";
  try {
    return ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw InvalidArgument("gloo: cannot listen on " + where + ": " + e.what());
  }
}

}  // namespace

std::unique_ptr<Context> Context::connect(const BackendArgs& args, const std::string& prefix,
                                          const std::vector<int>& neighbours) {
  const int rank = args.identity.rank;
  const int size = args.identity.size;
  KOLO_CHECK_ARG(
      size >= 1 && rank >= 0 && rank < size,
      "gloo: bad identity rank " + std::to_string(rank) + " of size " + std::to_string(size));
  KOLO_CHECK_ARG(args.store != nullptr, "gloo: no rendezvous store");
  const auto timeout = args.config.timeout;
  KOLO_CHECK_ARG(timeout.count() > 0, "gloo: timeout must be positive");

  auto device = createDevice(args);
  auto context = std::make_shared<SparseContext>(rank, size, std::move(device), timeout);
  auto transport = context->transport();
  std::unique_ptr<Context> result(new Context(std::move(context), std::move(transport),
                                              std::make_shared<PrefixStore>(prefix, args.store),
                                              rank, size, timeout));
  const std::string what = "gloo connect (rank " + std::to_string(rank) + " of " +
                           std::to_string(size) + ", store prefix '" + prefix + "') failed: ";
  try {
    result->connectPeers(neighbours);
  } catch (const Timeout& e) {
    throw Timeout(what + e.what());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // gloo reports IO trouble during connect through GLOO_ENFORCE too.
    if (mentionsTimeout(e.what())) throw Timeout(what + e.what());
    throw PeerFailure(what + e.what());
  }
  return result;
}

Context::Context(std::shared_ptr<::gloo::Context> context,
                 std::shared_ptr<::gloo::transport::Context> transport,
                 std::shared_ptr<Store> store, int rank, int size,
                 std::chrono::milliseconds timeout)
    : context_(std::move(context)),
      transport_(std::move(transport)),
      store_(std::move(store)),
      connected_(size, false),
      rank_(rank),
      size_(size),
      timeout_(timeout) {}

int Context::connectedPeers() const {
  return static_cast<int>(std::count(connected_.begin(), connected_.end(), true));
}

void Context::connectPeers(const std::vector<int>& peers) {
  auto isNew = [&](int peer) {
    return peer >= 0 && peer < size_ && peer != rank_ && !connected_[peer];
  };
  if (std::none_of(peers.begin(), peers.end(), isNew)) return;  // every call after the first
  std::vector<int> fresh;
  for (int peer : peers) {
    if (isNew(peer)) fresh.push_back(peer);
  }
  std::sort(fresh.begin(), fresh.end());
  fresh.erase(std::unique(fresh.begin(), fresh.end()), fresh.end());
  if (fresh.empty()) return;
  const std::string me = std::to_string(rank_);
  std::vector<std::string> keys;
  for (int peer : fresh) {
    auto& pair = transport_->createPair(peer);
    store_->set("pair/" + me + "/" + std::to_string(peer), pair->address().bytes());
    keys.push_back("pair/" + std::to_string(peer) + "/" + me);
  }
  std::vector<std::vector<char>> addresses;
  try {
    addresses = store_->multiGet(keys, timeout_);
  } catch (const Timeout&) {
    const std::vector<int> missing = rendezvous::ranksWithoutKey(*store_, keys, fresh);
    if (missing.empty()) throw;
    throw Timeout("connect: " + rendezvous::notArrived(missing, timeout_));
  }
  // Each pair's connect waits for its peer's; running them side by side
  // keeps one slow peer from holding up the rest (and any order of waits
  // from forming a cycle between ranks).
  std::vector<std::exception_ptr> errors(fresh.size());
  std::vector<std::thread> threads;
  threads.reserve(fresh.size());
  for (size_t i = 0; i < fresh.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        transport_->getPair(fresh[i])->connect(addresses[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  for (int peer : fresh) connected_[peer] = true;
  // One byte each way on every new pair: neither end goes on (and so could
  // close the connection) before the other has taken it in; gloo aborts the
  // process when a connection is reset before its accept was handled.
  std::vector<char> out(fresh.size(), 1);
  std::vector<char> in(fresh.size(), 0);
  auto sendBuf = context_->createUnboundBuffer(out.data(), out.size());
  auto recvBuf = context_->createUnboundBuffer(in.data(), in.size());
  const auto slot = ::gloo::Slot::build(kHandshakeSlotPrefix, 0);
  for (size_t i = 0; i < fresh.size(); ++i) {
    sendBuf->send(fresh[i], slot, i, 1);
    recvBuf->recv(fresh[i], slot, i, 1);
  }
  for (size_t i = 0; i < fresh.size(); ++i) waitSend(*sendBuf, timeout_);
  for (size_t i = 0; i < fresh.size(); ++i) waitRecv(*recvBuf, timeout_);
}

Context::~Context() {
  // Soft close: destroying the pairs closes their sockets after the kernel
  // has sent what is queued, then the device joins gloo's event loop thread.
  // abandon()'s close (a reset) is kept for failures: after a successful
  // collective it could drop the tail of this rank's last message to a
  // peer, which gloo then never reports to the peer's waiting receive.
  context_.reset();
}

void Context::abandon(const std::string& why) noexcept {
  if (failed_) return;
  failed_ = true;
  failure_ = why;
  try {
    context_->closeConnections();
  } catch (...) {
    // Already closed or never connected; nothing left to release.
  }
}

void Context::run(const char* what, const std::function<void(uint32_t tag)>& fn) {
  if (failed_) {
    const std::string message = std::string("gloo ") + what +
                                " failed: backend unusable after an earlier "
                                "failure: " +
                                failure_;
    if (failedByTimeout_) throw Timeout(message);
    throw PeerFailure(message);
  }
  const uint32_t tag = nextTag_++;
  try {
    fn(tag);
  } catch (const Timeout& e) {
    fail(what, e.what(), true);
  } catch (const Error& e) {
    // kolo's own errors (e.g. Internal) pass through; the network state is
    // unknown afterwards, so the context is still poisoned.
    abandon(e.what());
    throw;
  } catch (const ::gloo::IoException& e) {
    fail(what, e.what(), mentionsTimeout(e.what()));
  } catch (const ::gloo::EnforceNotMet& e) {
    fail(what, e.what(), mentionsTimeout(e.what()));
  } catch (const std::exception& e) {
    fail(what, e.what(), mentionsTimeout(e.what()));
  }
}

void Context::fail(const char* what, const std::string& text, bool isTimeout) {
  failedByTimeout_ = isTimeout;  // run() checked: not failed before
  // Peers blocked on this rank learn about the failure from the closed
  // connections instead of waiting out their own timeout.
  abandon(std::string("gloo ") + what + " failed: " + text);
  if (isTimeout) {
    throw Timeout(failure_ + " (timeout " + std::to_string(timeout_.count()) + " ms)");
  }
  throw PeerFailure(failure_);
}

void waitSend(::gloo::transport::UnboundBuffer& buf, std::chrono::milliseconds timeout) {
  if (!buf.waitSend(timeout)) {
    throw ::gloo::IoException("send aborted");
  }
}

void waitRecv(::gloo::transport::UnboundBuffer& buf, std::chrono::milliseconds timeout) {
  if (!buf.waitRecv(timeout)) {
    throw ::gloo::IoException("receive aborted");
  }
}

}  // namespace kolo::comm::gloo
