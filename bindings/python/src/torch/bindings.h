// Pieces of the _kolo_torch extension module (the torch half of kolo's
// Python package), one function per translation unit. Everything binds the
// process's default engine through the LibTorch adapter's default_context().
// The framework-free half (errors, process API, store, elastic primitives,
// arrays) is the _kolo module (src/), which _kolo_torch imports first.
#pragma once

#include <torch/extension.h>

#include "kolo/types.h"

namespace kolo::python {

namespace py = pybind11;

/// TensorHandle and the tensor collectives, generated names (ops.cc).
void bindOps(py::module_& m);
/// GradientReducer, behind kolo.torch.DistributedOptimizer (reducer.cc).
void bindReducer(py::module_& m);
/// ProcessGroupKolo, the torch.distributed backend "kolo" (c10d.cc).
void bindC10d(py::module_& m);

}  // namespace kolo::python

namespace pybind11::detail {

/// kolo::ReduceOp arrives as a kolo._kolo.ReduceOp value (bound once, in
/// _kolo) and is read by its integer value: _kolo and _kolo_torch may be
/// built with different pybind11 versions (torch's own, for pip's torch),
/// which share no registered types.
template <>
struct type_caster<kolo::ReduceOp> {
  PYBIND11_TYPE_CASTER(kolo::ReduceOp, const_name("kolo.ReduceOp"));

  bool load(handle src, bool) {
    if (!src || PyBool_Check(src.ptr()) || PyFloat_Check(src.ptr()) ||
        !PyObject_HasAttrString(src.ptr(), "__int__"))
      return false;
    object number = reinterpret_steal<object>(PyNumber_Long(src.ptr()));
    if (!number) {
      PyErr_Clear();
      return false;
    }
    const long v = PyLong_AsLong(number.ptr());
    if (v < 0 || v >= kolo::kNumReduceOps) return false;
    value = static_cast<kolo::ReduceOp>(v);
    return true;
  }

  static handle cast(kolo::ReduceOp op, return_value_policy, handle) {
    return module_::import("kolo._kolo").attr("ReduceOp")(static_cast<int>(op)).release();
  }
};

}  // namespace pybind11::detail
