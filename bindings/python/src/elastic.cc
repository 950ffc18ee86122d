// The primitives under kolo's elastic API (kolo/elastic.h): whether this is
// an elastic worker, the collective host-update check, the re-initialisation
// into the next world, and the sampler's partitioning. The Python layer
// holds the horovod.elastic API on top.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>

#include "bindings.h"
#include "kolo/elastic.h"
#include "kolo/error.h"

namespace kolo::python {

using Release = py::call_guard<py::gil_scoped_release>;

namespace {

namespace ke = kolo::elastic;

// Runs a Python call from the core's elastic loop (which runs without the
// GIL) and turns the two exceptions the loop acts on into its own: the
// Python HostsUpdatedInterrupt into ke::HostsUpdatedInterrupt, KoloInternalError
// (a peer failed, a timeout, a shutdown) into PeerFailure with its message.
// Any other Python exception goes through the loop unchanged.
template <class Call>
void fromPython(const py::object& hostsUpdated, Call&& call) {
  py::gil_scoped_acquire gil;
  try {
    call();
  } catch (py::error_already_set& e) {
    if (e.matches(hostsUpdated)) throw ke::HostsUpdatedInterrupt();
    if (e.matches(py::module_::import("kolo._kolo").attr("KoloInternalError"))) {
      throw PeerFailure(py::str(e.value()).cast<std::string>());
    }
    throw;
  }
}

// A Python elastic State (kolo.common.elastic.State) under the core's loop.
class PythonState : public ke::State {
 public:
  PythonState(py::object state, py::object onReset, py::object hostsUpdated)
      : state_(std::move(state)), hostsUpdated_(std::move(hostsUpdated)) {
    register_reset_callbacks({[this, onReset = std::move(onReset)] {
      fromPython(hostsUpdated_, [&] { onReset(); });
    }});
  }
  // The Python objects are released with the GIL held.
  ~PythonState() override {
    py::gil_scoped_acquire gil;
    state_ = py::object();
    hostsUpdated_ = py::object();
  }
  void save() override { call("save"); }
  void restore() override { call("restore"); }
  void sync() override { call("sync"); }

 private:
  void call(const char* method) {
    fromPython(hostsUpdated_, [&] { state_.attr(method)(); });
  }

  py::object state_;
  py::object hostsUpdated_;
};

}  // namespace

void bindElastic(py::module_& m) {
  m.def("elastic_enabled", &ke::enabled,
        "True in a worker of kolorun's elastic driver after init().");
  m.def("elastic_world_version", &ke::world_version);
  m.def("elastic_worker_id", &ke::worker_id);
  m.def("elastic_hosts_updated", &ke::detail::hostsUpdated, Release(),
        "Collective: True on every rank when the driver changed the hosts since this world "
        "formed (rank 0 asks, everyone gets its answer).");
  m.def(
      "elastic_run",
      [](py::object state, py::function fn, py::function onReset, py::object hostsUpdated) {
        // Destroyed while the GIL is held again (its destructor takes it too).
        auto core = std::make_unique<PythonState>(state, std::move(onReset), hostsUpdated);
        py::object result = py::none();
        {
          py::gil_scoped_release release;
          ke::detail::runLoop(*core, [&] { fromPython(hostsUpdated, [&] { result = fn(); }); });
        }
        return result;
      },
      py::arg("state"), py::arg("fn"), py::arg("on_reset"), py::arg("hosts_updated_type"),
      "The core's elastic loop (kolo::elastic::run) over a Python State: fn() until it "
      "returns; on KoloInternalError the state is restored, on hosts_updated_type it is kept; "
      "then the world re-forms, on_reset() runs, the state syncs and fn() runs again.");
  m.def("elastic_reset", &ke::detail::resetWorld, Release(), py::arg("reason"),
        "shutdown() and init() into the next world, telling the driver why this worker left.");

  py::class_<ke::ElasticSampler>(m, "ElasticSamplerCore",
                                 "kolo::elastic::ElasticSampler: the epoch's order, the "
                                 "processed prefix and this rank's share of the rest.")
      .def(py::init<int64_t, bool, uint64_t>(), py::arg("dataset_size"), py::arg("shuffle"),
           py::arg("seed"))
      .def("indices", &ke::ElasticSampler::indices)
      .def("get_indices", &ke::ElasticSampler::get_indices)
      .def("record_batch", &ke::ElasticSampler::record_batch)
      .def("set_epoch", &ke::ElasticSampler::set_epoch)
      .def("reset", py::overload_cast<>(&ke::ElasticSampler::reset))
      .def("processed_indices", &ke::ElasticSampler::processed_indices)
      .def("state_dict", &ke::ElasticSampler::state_dict)
      .def("load_state_dict", &ke::ElasticSampler::load_state_dict)
      .def_property_readonly("epoch", &ke::ElasticSampler::epoch)
      .def_property_readonly("processed_num", &ke::ElasticSampler::processed_num)
      .def_property_readonly("num_replicas", &ke::ElasticSampler::num_replicas)
      .def_property_readonly("rank", &ke::ElasticSampler::rank)
      .def_property_readonly("num_samples", &ke::ElasticSampler::num_samples);
}

}  // namespace kolo::python
