// Generated operation names from Python: the engine's counters
// (Engine::nameOrNext), which the LibTorch adapter and the array API draw
// from too, so every API of a process sees one sequence.
#include <string>

#include "bindings.h"
#include "kolo/engine.h"
#include "kolo/kolo.h"

namespace kolo::python {

void bindNames(py::module_& m) {
  m.def(
      "next_name",
      [](const std::string& op, int set) { return kolo::defaultEngine().nameOrNext("", op, set); },
      py::arg("op"), py::arg("process_set") = 0,
      "The engine's next generated name for op in the process set (\"noname.<op>.<n>\"), for "
      "Python-side composite operations.");
  m.def(
      "reset_names", [] { kolo::defaultEngine().resetNames(); },
      "Generated names start again at 0 in every set (a new engine starts at 0 itself).");
}

}  // namespace kolo::python
