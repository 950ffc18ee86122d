// The primitives under kolo's elastic API (kolo/elastic.h): whether this is
// an elastic worker, the collective host-update check, the re-initialisation
// into the next world, and the sampler's partitioning. The Python layer
// holds the horovod.elastic API on top.
#include <pybind11/stl.h>

#include "bindings.h"
#include "kolo/elastic.h"

namespace kolo::python {

using Release = py::call_guard<py::gil_scoped_release>;

void bindElastic(py::module_& m) {
  namespace ke = kolo::elastic;
  m.def("elastic_enabled", &ke::enabled,
        "True in a worker of kolorun's elastic driver after init().");
  m.def("elastic_world_version", &ke::world_version);
  m.def("elastic_worker_id", &ke::worker_id);
  m.def("elastic_hosts_updated", &ke::detail::hostsUpdated, Release(),
        "Collective: True on every rank when the driver changed the hosts since this world "
        "formed (rank 0 asks, everyone gets its answer).");
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
