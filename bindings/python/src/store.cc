// The job's rendezvous store, served from Python (kolo/tcp_store.h): the
// driver of kolo.ray, kolo.run and kolo.spark hosts it for its workers as
// kolorun hosts it for its processes; StoreClient is the workers' side
// (kolo.run and kolo.spark fetch the function and post results with it). The driver reads and writes the server's own data directly
// (no network hop), as kolorun's elastic driver does, and writes elastic
// world records with the launcher's encoding (kolo/elastic_world.h).
//
// Threading: a StoreServer may be used from any Python thread; blocking
// calls release the GIL.
#include <chrono>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "kolo/config.h"
#include "kolo/elastic_world.h"
#include "kolo/error.h"
#include "kolo/tcp_store.h"

namespace kolo::python {

namespace py = pybind11;

namespace {

// Owns the server until close() or destruction; afterwards every call
// raises KoloError ("store is closed").
class StoreServer {
 public:
  StoreServer(const std::string& host, uint16_t port, std::string secret)
      : server_(std::make_unique<TcpStoreServer>(host, port, std::move(secret))),
        store_(server_->localStore()),
        port_(server_->port()) {}

  uint16_t port() const { return port_; }

  void set(const std::string& key, const std::string& value) {
    open().set(key, std::vector<char>(value.begin(), value.end()));
  }
  std::string get(const std::string& key, double timeoutSeconds) {
    auto ms = std::chrono::milliseconds(static_cast<int64_t>(timeoutSeconds * 1000));
    std::vector<char> v = open().get(key, ms);
    return {v.begin(), v.end()};
  }
  bool check(const std::string& key) { return open().check(key); }
  int64_t add(const std::string& key, int64_t delta) { return open().add(key, delta); }

  // Tells the members of elastic world `version` that its rank `rank` is
  // gone, so their engines fail at once naming it (what kolorun's elastic
  // driver does when it sees a worker exit).
  void publishLostRank(int64_t version, int rank, const std::string& why) {
    elastic::publishLostRank(open(), version, rank, why);
  }

  // Stops serving and closes every connection; idempotent.
  void close() {
    store_.reset();
    server_.reset();
  }

 private:
  Store& open() {
    if (!store_) throw InvalidArgument("the rendezvous store is closed");
    return *store_;
  }

  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
  uint16_t port_;
};

// An authenticated client of a StoreServer (or of kolorun's store); the
// secret is checked by the HMAC challenge before any request. Owns its
// connection pool until close() or destruction.
class StoreClient {
 public:
  StoreClient(const std::string& host, uint16_t port, const std::string& secret,
              double connectTimeoutSeconds) {
    TcpStoreOptions options;
    options.connectTimeout =
        std::chrono::milliseconds(static_cast<int64_t>(connectTimeoutSeconds * 1000));
    store_ = makeTcpStore(host, port, secret, options);
  }

  void set(const std::string& key, const std::string& value) {
    open().set(key, std::vector<char>(value.begin(), value.end()));
  }
  std::string get(const std::string& key, double timeoutSeconds) {
    auto ms = std::chrono::milliseconds(static_cast<int64_t>(timeoutSeconds * 1000));
    std::vector<char> v = open().get(key, ms);
    return {v.begin(), v.end()};
  }
  bool check(const std::string& key) { return open().check(key); }
  int64_t add(const std::string& key, int64_t delta) { return open().add(key, delta); }
  void close() { store_.reset(); }

 private:
  Store& open() {
    if (!store_) throw InvalidArgument("the store client is closed");
    return *store_;
  }

  std::shared_ptr<Store> store_;
};

// (worker, host, rank, local_rank, local_size, cross_rank, cross_size), in
// rank order.
using MemberTuple = std::tuple<int64_t, std::string, int, int, int, int, int>;

std::string encodeWorld(int64_t version, int64_t notice, const std::vector<MemberTuple>& members) {
  elastic::World world;
  world.version = version;
  world.notice = notice;
  const int size = static_cast<int>(members.size());
  for (const auto& [worker, host, rank, localRank, localSize, crossRank, crossSize] : members) {
    elastic::WorldMember m;
    m.worker = worker;
    m.host = host;
    m.identity = Identity{rank, size, localRank, localSize, crossRank, crossSize};
    world.members.push_back(std::move(m));
  }
  return elastic::encodeWorld(world);
}

}  // namespace

void bindStore(py::module_& m) {
  using Release = py::call_guard<py::gil_scoped_release>;
  py::class_<StoreServer>(m, "StoreServer",
                          "kolo's authenticated rendezvous store, served by this process "
                          "(HMAC-SHA256 challenge keyed by secret on every connection).")
      .def(py::init<const std::string&, uint16_t, std::string>(), py::arg("host"),
           py::arg("port"), py::arg("secret"),
           "Listens on host:port (port 0: a free one; host '' : every interface).")
      .def_property_readonly("port", &StoreServer::port)
      .def(
          "set",
          [](StoreServer& s, const std::string& key, py::bytes value) {
            s.set(key, std::string(value));
          },
          py::arg("key"), py::arg("value"))
      .def(
          "get",
          [](StoreServer& s, const std::string& key, double timeout) {
            std::string v;
            {
              py::gil_scoped_release release;
              v = s.get(key, timeout);
            }
            return py::bytes(v);
          },
          py::arg("key"), py::arg("timeout"),
          "Waits up to timeout seconds for key; raises KoloInternalError on timeout.")
      .def("check", &StoreServer::check, py::arg("key"))
      .def("add", &StoreServer::add, py::arg("key"), py::arg("delta"))
      .def("publish_lost_rank", &StoreServer::publishLostRank, Release(), py::arg("version"),
           py::arg("rank"), py::arg("why"))
      .def("close", &StoreServer::close, Release());
  py::class_<StoreClient>(m, "StoreClient",
                          "A client of kolo's authenticated rendezvous store (StoreServer or "
                          "kolorun's); every connection answers the server's HMAC-SHA256 "
                          "challenge keyed by secret.")
      .def(py::init<const std::string&, uint16_t, const std::string&, double>(), Release(),
           py::arg("host"), py::arg("port"), py::arg("secret"), py::arg("connect_timeout") = 60.0,
           "Connects to host:port, retrying for up to connect_timeout seconds; "
           "KoloInternalError when the server refuses the secret or never answers.")
      .def(
          "set",
          [](StoreClient& s, const std::string& key, py::bytes value) {
            std::string v(value);
            py::gil_scoped_release release;
            s.set(key, v);
          },
          py::arg("key"), py::arg("value"))
      .def(
          "get",
          [](StoreClient& s, const std::string& key, double timeout) {
            std::string v;
            {
              py::gil_scoped_release release;
              v = s.get(key, timeout);
            }
            return py::bytes(v);
          },
          py::arg("key"), py::arg("timeout"),
          "Waits up to timeout seconds for key; raises KoloInternalError on timeout.")
      .def("check", &StoreClient::check, Release(), py::arg("key"))
      .def("add", &StoreClient::add, Release(), py::arg("key"), py::arg("delta"))
      .def("close", &StoreClient::close, Release());
  m.def("encode_world", &encodeWorld, py::arg("version"), py::arg("notice"), py::arg("members"),
        "The elastic world record (kolo/elastic_world.h) of members (worker, host, rank, "
        "local_rank, local_size, cross_rank, cross_size) in rank order.");
}

}  // namespace kolo::python
