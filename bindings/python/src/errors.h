// kolo's Python exception classes and the translation of kolo::Error into
// them. Compiled into both extension modules: _kolo creates the classes,
// _kolo_torch adopts _kolo's, so an error raised by either is the same
// Python class (kolo.KoloError and its subclasses).
#pragma once

#include <pybind11/pybind11.h>

namespace kolo::python {

/// Creates KoloError, KoloInternalError, KoloMismatchError and
/// KoloInvalidArgumentError in m (the _kolo module) and translates
/// kolo::Error into them from then on. Once, at import, with the GIL.
void registerErrors(pybind11::module_& m);

/// For a module other than _kolo: takes the classes from kolo_module
/// (kolo._kolo, imported) and translates this module's kolo::Error into
/// them. Once, at import, with the GIL.
void adoptErrors(const pybind11::module_& kolo_module);

}  // namespace kolo::python
