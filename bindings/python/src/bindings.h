// Pieces of the _kolo extension module, one function per translation unit.
// Everything binds the process's default engine (kolo::init()) through the
// LibTorch adapter's default_context(); no collective is implemented here.
#pragma once

#include <torch/extension.h>

namespace kolo::python {

namespace py = pybind11;

// KoloError and its subclasses, and the C++ -> Python error translation
// (module.cc).
void registerErrors(py::module_& m);
// init/shutdown, identity, build and runtime configuration, timeline.
void bindProcess(py::module_& m);
// TensorHandle, ReduceOp and the tensor collectives (ops.cc).
void bindOps(py::module_& m);
// The primitives of kolo.torch.elastic (elastic.cc).
void bindElastic(py::module_& m);
// GradientReducer, behind kolo.torch.DistributedOptimizer (reducer.cc).
void bindReducer(py::module_& m);
// The rendezvous store served from Python, for kolo.ray's driver (store.cc).
void bindStore(py::module_& m);
// ProcessGroupKolo, the torch.distributed backend "kolo" (c10d.cc).
void bindC10d(py::module_& m);

}  // namespace kolo::python
