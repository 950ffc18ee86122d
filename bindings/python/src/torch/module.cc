// The _kolo_torch extension module: the torch half of kolo's Python package
// (tensor collectives, the gradient reducer, the c10d backend). It raises
// _kolo's error classes, so kolo._kolo is imported first.
#include "../errors.h"
#include "bindings.h"

PYBIND11_MODULE(_kolo_torch, m) {
  m.doc() = "kolo: the LibTorch adapter behind kolo.torch (on the engine of kolo._kolo)";
  kolo::python::adoptErrors(pybind11::module_::import("kolo._kolo"));
  kolo::python::bindOps(m);
  kolo::python::bindReducer(m);
  kolo::python::bindC10d(m);
}
