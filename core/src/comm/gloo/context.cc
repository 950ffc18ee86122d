#include "comm/gloo/context.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <utility>

#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "comm/gloo/store_adapter.h"
#include "comm/tcp/interfaces.h"
#include "kolo/error.h"

namespace kolo::comm::gloo {
namespace {

// Tag of the barrier that ends connect(); run() hands out tags from 1.
constexpr uint32_t kConnectTag = 0;

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

std::unique_ptr<Context> Context::connect(const BackendArgs& args, const std::string& prefix) {
  const int rank = args.identity.rank;
  const int size = args.identity.size;
  KOLO_CHECK_ARG(
      size >= 1 && rank >= 0 && rank < size,
      "gloo: bad identity rank " + std::to_string(rank) + " of size " + std::to_string(size));
  KOLO_CHECK_ARG(args.store != nullptr, "gloo: no rendezvous store");
  const auto timeout = args.config.timeout;
  KOLO_CHECK_ARG(timeout.count() > 0, "gloo: timeout must be positive");

  auto device = createDevice(args);
  StoreAdapter store(std::make_shared<PrefixStore>(prefix, args.store), timeout);
  auto context = std::make_shared<::gloo::rendezvous::Context>(rank, size);
  const std::string what = "gloo connect (rank " + std::to_string(rank) + " of " +
                           std::to_string(size) + ", store prefix '" + prefix + "') failed: ";
  try {
    context->setTimeout(timeout);
    context->connectFullMesh(store, device);
    if (size > 1) {
      // Nobody returns (and so nobody can close a connection) before every
      // rank has finished accepting its connections: gloo aborts the process
      // when a connection is reset before its accept has been handled.
      ::gloo::BarrierOptions barrier(context);
      barrier.setTag(kConnectTag);
      barrier.setTimeout(timeout);
      ::gloo::barrier(barrier);
    }
  } catch (const Timeout& e) {
    throw Timeout(what + e.what());
  } catch (const Error&) {
    throw;
  } catch (const ::gloo::EnforceNotMet& e) {
    // gloo reports IO trouble during connect through GLOO_ENFORCE too.
    if (mentionsTimeout(e.what())) throw Timeout(what + e.what());
    throw PeerFailure(what + e.what());
  } catch (const std::exception& e) {
    if (mentionsTimeout(e.what())) throw Timeout(what + e.what());
    throw PeerFailure(what + e.what());
  }
  return std::unique_ptr<Context>(new Context(std::move(context), rank, size, timeout));
}

Context::Context(std::shared_ptr<::gloo::Context> context, int rank, int size,
                 std::chrono::milliseconds timeout)
    : context_(std::move(context)), rank_(rank), size_(size), timeout_(timeout) {}

Context::~Context() {
  // Soft close: destroying the pairs closes their sockets after the kernel
  // has sent what is queued, then the device joins gloo's event loop thread.
  // closeConnections() (a reset) is kept for failures: after a successful
  // collective it could drop the tail of this rank's last message to a
  // peer, which gloo then never reports to the peer's waiting receive.
  context_.reset();
}

void Context::closeConnections() noexcept {
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
    failed_ = true;
    failure_ = e.what();
    closeConnections();
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
  failed_ = true;
  failedByTimeout_ = isTimeout;
  failure_ = std::string("gloo ") + what + " failed: " + text;
  // Peers blocked on this rank learn about the failure from the closed
  // connections instead of waiting out their own timeout.
  closeConnections();
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
