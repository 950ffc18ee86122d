// ProcessGroupKolo for torch.distributed: the class (a c10d backend, so
// torch can hold and call it) and the creator kolo.torch.distributed
// registers as the "kolo" backend.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "kolo/torch/c10d.h"

namespace kolo::python {

void bindC10d(py::module_& m) {
  using kolo::torch::ProcessGroupKolo;
  py::class_<ProcessGroupKolo, kolo::torch::C10dBackend, c10::intrusive_ptr<ProcessGroupKolo>>(
      m, "ProcessGroupKolo",
      "A torch.distributed process group (backend) over kolo's engine; made by "
      "torch.distributed when a group's backend is \"kolo\".")
      .def_property_readonly("label", &ProcessGroupKolo::label,
                             "How messages name the group (\"process group 0\").");
  m.def(
      "_create_process_group",
      [](const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
         std::chrono::duration<float> timeout, const std::string& groupName,
         const std::vector<int64_t>& globalRanks) {
        kolo::torch::ProcessGroupKoloOptions options;
        options.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
        options.groupName = groupName;
        options.globalRanks = globalRanks;
        return c10::make_intrusive<ProcessGroupKolo>(store, rank, size, std::move(options));
      },
      py::call_guard<py::gil_scoped_release>(), py::arg("store"), py::arg("rank"),
      py::arg("size"), py::arg("timeout"), py::arg("group_name"), py::arg("global_ranks"),
      "Connects this rank's kolo process group through torch's store (blocks until every rank "
      "of the group arrived).");
}

}  // namespace kolo::python
