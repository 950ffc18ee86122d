// Pieces of the framework-free _kolo extension module, one function per
// translation unit. Everything binds the process's default engine
// (kolo::init(), kolo::defaultEngine()); no collective is implemented here.
// Nothing here includes a framework's headers: the torch parts are in the
// separate _kolo_torch module (src/torch/).
#pragma once

#include <pybind11/pybind11.h>

namespace kolo::python {

namespace py = pybind11;

/// init/shutdown, identity, build and runtime configuration, timeline,
/// process sets, barrier and join (module.cc).
void bindProcess(py::module_& m);
/// The primitives of the elastic API (elastic.cc).
void bindElastic(py::module_& m);
/// The rendezvous store served from Python, for kolo.ray's driver (store.cc).
void bindStore(py::module_& m);
/// Generated operation names of the framework-free API (names.cc).
void bindNames(py::module_& m);
/// The decisions every DistributedOptimizer shares (gradients.cc).
void bindGradients(py::module_& m);
/// ReduceOp, ArrayHandle and the collectives on NumPy arrays (arrays.cc).
void bindArrays(py::module_& m);

}  // namespace kolo::python
