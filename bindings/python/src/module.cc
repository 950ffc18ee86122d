// The _kolo extension module: exceptions, the process-level API (init,
// identity, build and runtime configuration, timeline). The collectives are
// bound in ops.cc.
#include <string>

#include "bindings.h"
#include "kolo/build_config.h"
#include "kolo/error.h"
#include "kolo/kolo.h"
#include "kolo/torch.h"

namespace kolo::python {

// Python exception classes, created once at import and owned by the module
// (these references are never released: the module lives as long as the
// interpreter).
struct ErrorClasses {
  PyObject* base = nullptr;             // KoloError(RuntimeError)
  PyObject* internal = nullptr;         // KoloInternalError(KoloError)
  PyObject* mismatch = nullptr;         // KoloMismatchError(KoloError, ValueError)
  PyObject* invalidArgument = nullptr;  // KoloInvalidArgumentError(KoloError, ValueError)
};
static ErrorClasses errors;  // filled once at import

static PyObject* newError(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string qualified = std::string("kolo.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(cls));  // the module takes its own reference
  return cls;
}

void registerErrors(py::module_& m) {
  errors.base = newError(m, "KoloError", py::make_tuple(py::handle(PyExc_RuntimeError)),
                         "Base class of the errors raised by kolo.");
  errors.internal = newError(
      m, "KoloInternalError", py::make_tuple(py::handle(errors.base)),
      "The job cannot go on: a peer failed or timed out, or kolo was shut down "
      "(the counterpart of horovod's HorovodInternalError).");
  // As in Horovod, where these arrive as ValueError: a script that catches
  // bad arguments catches a disagreement between ranks about them too.
  errors.mismatch = newError(
      m, "KoloMismatchError",
      py::make_tuple(py::handle(errors.base), py::handle(PyExc_ValueError)),
      "Ranks submitted incompatible requests for one tensor name (also a ValueError).");
  errors.invalidArgument = newError(
      m, "KoloInvalidArgumentError",
      py::make_tuple(py::handle(errors.base), py::handle(PyExc_ValueError)),
      "An argument was rejected (also a ValueError).");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kolo::Error& e) {
      PyObject* cls = errors.base;
      switch (e.code()) {
        case ErrorCode::kInvalidArgument: cls = errors.invalidArgument; break;
        case ErrorCode::kMismatch: cls = errors.mismatch; break;
        case ErrorCode::kTimeout:
        case ErrorCode::kPeerFailure:
        case ErrorCode::kShutdown:
        case ErrorCode::kInternal: cls = errors.internal; break;
        case ErrorCode::kOk: break;
      }
      PyErr_SetString(cls, e.what());
    }
  });
}

void bindProcess(py::module_& m) {
  using Release = py::call_guard<py::gil_scoped_release>;
  // init() and shutdown() block on rendezvous and on the background thread,
  // which may need the GIL to free tensors that Python handed over.
  m.def("init", &kolo::init, Release(), py::arg("process_sets"),
        "Joins the job described by the launcher's environment (kolorun, torchrun, "
        "mpirun, Slurm; none: a job of size 1), with static process sets (ids 1, 2, ...).");
  m.def(
      "abort", [](const std::string& message) { kolo::defaultEngine().abort(message); },
      Release(), py::arg("message"),
      "Fails this rank with message: every rank's pending and later operations fail with "
      "'rank R failed: message'.");
  m.def("shutdown", &kolo::shutdown, Release(),
        "Leaves the job (idempotent); pending operations fail. init() may be called again.");
  m.def("shutdown_at_exit", &kolo::shutdownAtExit, Release(),
        "shutdown() bounded by KOLO_TIMEOUT; past it, ends the process with exit code 1 "
        "(what the atexit hook runs).");
  m.def("is_initialized", &kolo::isInitialized,
        "True between init() and shutdown().");
  m.def("rank", &kolo::rank,
        "This process's rank in the job, 0 .. size()-1. Raises KoloInvalidArgumentError "
        "(a ValueError) before init(), as do the other rank and size functions.");
  m.def("size", &kolo::size, "Number of ranks in the job.");
  m.def("local_rank", &kolo::localRank,
        "This process's rank among the ranks on its host, 0 .. local_size()-1.");
  m.def("local_size", &kolo::localSize, "Number of ranks on this process's host.");
  m.def("cross_rank", &kolo::crossRank,
        "Index of this process's host among the job's hosts, as the launcher numbers them.");
  m.def("cross_size", &kolo::crossSize, "Number of hosts in the job.");

  m.def("build_info", [] {
    py::dict info;
    info["version"] = KOLO_VERSION;
    info["gloo"] = bool(KOLO_WITH_GLOO);
    info["mpi"] = bool(KOLO_WITH_MPI);
    info["cuda"] = bool(KOLO_WITH_CUDA);
    info["nccl"] = bool(KOLO_WITH_NCCL);
    info["nccl_version"] = kolo::ncclVersion();
    return info;
  });
  // The running engine's configuration (after init()).
  m.def("runtime_config", [] {
    const Config& c = kolo::defaultEngine().config();
    py::dict out;
    out["controller"] = c.controller;
    out["cpu_operations"] = c.cpuOperations;
    out["gpu_operations"] = c.gpuOperations;
    out["timeline_mark_cycles"] = c.timelineMarkCycles;
    out["timeout_s"] = std::chrono::duration<double>(c.timeout).count();
    return out;
  });

  m.def(
      "start_timeline",
      [](const std::string& path) { kolo::defaultEngine().startTimeline(path); }, Release(),
      py::arg("path"));
  m.def(
      "stop_timeline", [] { kolo::defaultEngine().stopTimeline(); }, Release());

  // Names generated by the adapter's default context ("noname.<op>.<n>"),
  // for Python-side composite operations.
  m.def(
      "next_name",
      [](const std::string& op, int set) {
        return kolo::torch::default_context().name_or_next("", op.c_str(),
                                                           kolo::torch::ProcessSet(set));
      },
      py::arg("op"), py::arg("process_set") = 0);
}

}  // namespace kolo::python

PYBIND11_MODULE(_kolo, m) {
  m.doc() = "kolo: the C++ engine and LibTorch adapter behind kolo.torch";
  kolo::python::registerErrors(m);
  kolo::python::bindProcess(m);
  kolo::python::bindOps(m);
  kolo::python::bindElastic(m);
  kolo::python::bindStore(m);
  kolo::python::bindReducer(m);
  kolo::python::bindC10d(m);
}
