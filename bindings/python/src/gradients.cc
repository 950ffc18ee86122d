// What every DistributedOptimizer decides alike (kolo/gradients.h), for the
// Python optimizers: Horovod's num_groups split.
#include <cstddef>
#include <vector>

#include <pybind11/stl.h>

#include "bindings.h"
#include "kolo/gradients.h"

namespace kolo::python {

void bindGradients(py::module_& m) {
  m.def(
      "split_into_groups",
      [](size_t count, int numGroups) { return kolo::splitIntoGroups(count, numGroups); },
      py::arg("count"), py::arg("num_groups"),
      "Horovod's split of count parameters into num_groups contiguous groups of indices, the "
      "first ones one longer (10 in 4: 3, 3, 2, 2); no empty groups.");
}

}  // namespace kolo::python
