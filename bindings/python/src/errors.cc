// Python exception classes for kolo::Error and the translator that raises
// them (errors.h).
#include "errors.h"

#include <exception>
#include <string>

#include "kolo/error.h"

namespace kolo::python {

namespace py = pybind11;

namespace {

// The classes this module raises, set once at import and never released:
// the module lives as long as the interpreter. Each extension module has
// its own copy of this struct (they are separate shared objects).
struct ErrorClasses {
  PyObject* base = nullptr;             // KoloError(RuntimeError)
  PyObject* internal = nullptr;         // KoloInternalError(KoloError)
  PyObject* mismatch = nullptr;         // KoloMismatchError(KoloError, ValueError)
  PyObject* invalidArgument = nullptr;  // KoloInvalidArgumentError(KoloError, ValueError)
};
ErrorClasses errors;

PyObject* newError(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string qualified = std::string("kolo.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(cls));  // the module takes its own reference
  return cls;
}

void registerTranslator() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kolo::Error& e) {
      PyObject* cls = errors.base;
      switch (e.code()) {
        case ErrorCode::kInvalidArgument:
          cls = errors.invalidArgument;
          break;
        case ErrorCode::kMismatch:
          cls = errors.mismatch;
          break;
        case ErrorCode::kTimeout:
        case ErrorCode::kPeerFailure:
        case ErrorCode::kShutdown:
        case ErrorCode::kInternal:
          cls = errors.internal;
          break;
        case ErrorCode::kOk:
          break;
      }
      PyErr_SetString(cls, e.what());
    }
  });
}

}  // namespace

void registerErrors(py::module_& m) {
  errors.base = newError(m, "KoloError", py::make_tuple(py::handle(PyExc_RuntimeError)),
                         "Base class of the errors raised by kolo.");
  errors.internal =
      newError(m, "KoloInternalError", py::make_tuple(py::handle(errors.base)),
               "The job cannot go on: a peer failed or timed out, or kolo was shut down "
               "(the counterpart of horovod's HorovodInternalError).");
  // As in Horovod, where these arrive as ValueError: a script that catches
  // bad arguments catches a disagreement between ranks about them too.
  errors.mismatch = newError(
      m, "KoloMismatchError", py::make_tuple(py::handle(errors.base), py::handle(PyExc_ValueError)),
      "Ranks submitted incompatible requests for one tensor name (also a ValueError).");
  errors.invalidArgument =
      newError(m, "KoloInvalidArgumentError",
               py::make_tuple(py::handle(errors.base), py::handle(PyExc_ValueError)),
               "An argument was rejected (also a ValueError).");
  registerTranslator();
}

void adoptErrors(const py::module_& kolo_module) {
  auto adopt = [&](const char* name) { return py::object(kolo_module.attr(name)).release().ptr(); };
  errors.base = adopt("KoloError");
  errors.internal = adopt("KoloInternalError");
  errors.mismatch = adopt("KoloMismatchError");
  errors.invalidArgument = adopt("KoloInvalidArgumentError");
  registerTranslator();
}

}  // namespace kolo::python
