// The framework-free _kolo extension module: exceptions, the process-level
// API (init, identity, build and runtime configuration, timeline, process
// sets, barrier, join). The collectives on arrays are bound in arrays.cc;
// the torch ones in the separate _kolo_torch module (src/torch/).
#include <chrono>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "bindings.h"
#include "errors.h"
#include "kolo/build_config.h"
#include "kolo/config.h"
#include "kolo/engine.h"
#include "kolo/kolo.h"

namespace kolo::python {

void bindProcess(py::module_& m) {
  using Release = py::call_guard<py::gil_scoped_release>;
  // init() and shutdown() block on rendezvous and on the background thread,
  // which may need the GIL to free tensors that Python handed over.
  m.def("init", &kolo::init, Release(), py::arg("process_sets"),
        "Joins the job described by the launcher's environment (kolorun, torchrun, "
        "mpirun, Slurm; none: a job of size 1), with static process sets (ids 1, 2, ...).");
  m.def(
      "abort", [](const std::string& message) { kolo::defaultEngine().abort(message); }, Release(),
      py::arg("message"),
      "Fails this rank with message: every rank's pending and later operations fail with "
      "'rank R failed: message'.");
  m.def("shutdown", &kolo::shutdown, Release(),
        "Leaves the job (idempotent); pending operations fail. init() may be called again.");
  m.def("shutdown_at_exit", &kolo::shutdownAtExit, Release(),
        "shutdown() bounded by KOLO_TIMEOUT; past it, ends the process with exit code 1 "
        "(what the atexit hook runs).");
  m.def("is_initialized", &kolo::isInitialized, "True between init() and shutdown().");
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
      "start_timeline", [](const std::string& path) { kolo::defaultEngine().startTimeline(path); },
      Release(), py::arg("path"));
  m.def(
      "stop_timeline", [] { kolo::defaultEngine().stopTimeline(); }, Release());

  // Process sets (collective over every rank; see kolo/common/process_sets.py).
  m.def(
      "add_process_set",
      [](const std::vector<int>& ranks) { return kolo::defaultEngine().addProcessSet(ranks); },
      Release(), py::arg("ranks"));
  m.def(
      "remove_process_set",
      [](int set) {
        if (set != 0) kolo::defaultEngine().removeProcessSet(set);
      },
      Release(), py::arg("process_set"));
  m.def(
      "process_set_ranks", [](int set) { return kolo::defaultEngine().processSet(set).ranks; },
      py::arg("process_set"), "The ranks of a process set (InvalidArgument if unknown).");
  m.def("process_set_ids", [] {
    std::vector<int> ids;
    for (const auto& info : kolo::defaultEngine().processSets()) ids.push_back(info.id);
    return ids;
  });

  m.def(
      "barrier", [](int set) { kolo::defaultEngine().barrier(set).wait(); }, Release(),
      py::arg("process_set"), "Blocks until every rank of the set arrived.");
  m.def(
      "join",
      [](int set) {
        Handle h = kolo::defaultEngine().join(set);
        h.wait();
        return h.joinResult();
      },
      Release(), py::arg("process_set"),
      "Blocks until every rank of the set joined; returns the last rank to join.");
}

}  // namespace kolo::python

PYBIND11_MODULE(_kolo, m) {
  m.doc() = "kolo: the C++ engine, without a framework (the torch parts: kolo._kolo_torch)";
  kolo::python::registerErrors(m);
  kolo::python::bindProcess(m);
  kolo::python::bindNames(m);
  kolo::python::bindGradients(m);
  kolo::python::bindElastic(m);
  kolo::python::bindStore(m);
  kolo::python::bindArrays(m);
}
