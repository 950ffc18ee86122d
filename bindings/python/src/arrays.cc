// The collectives on arrays, without a framework: what kolo.allreduce,
// kolo.allgather and the others (kolo/common/arrays.py) run on the default
// engine. Inputs are C-contiguous NumPy arrays in host memory (the Python
// layer converts DLPack and buffer-protocol objects and copies
// non-contiguous ones); outputs are new NumPy arrays over memory the
// engine wrote.
//
// Submission is the core's (kolo/tensor.h): an array becomes a TensorRef,
// outputs come from hostAllocator, and the NumPy result is a view of that
// memory that owns it (its TensorRef's keepAlive).
//
// Lifetime: an ArrayHandle keeps its input array alive and, if it is
// dropped before the operation ends, waits for it (without the GIL): the
// engine reads the input until then. The input's TensorRef holds no
// Python object, so none is touched off the Python threads.
//
// GIL: every call that enqueues or waits releases it.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "kolo/engine.h"
#include "kolo/error.h"
#include "kolo/kolo.h"
#include "kolo/tensor.h"
#include "kolo/types.h"

namespace kolo::python {

namespace {

const char* const kSupported =
    "float16, float32, float64, int8, int16, int32, int64, uint8 and bool";

// The engine's element type of a NumPy dtype; InvalidArgument naming what
// and the dtype for any other.
DataType dataTypeOf(const py::dtype& dtype, const std::string& what) {
  const char kind = dtype.kind();
  const auto size = dtype.itemsize();
  if (kind == 'f' && size == 2) return DataType::kFloat16;
  if (kind == 'f' && size == 4) return DataType::kFloat32;
  if (kind == 'f' && size == 8) return DataType::kFloat64;
  if (kind == 'i' && size == 1) return DataType::kInt8;
  if (kind == 'i' && size == 2) return DataType::kInt16;
  if (kind == 'i' && size == 4) return DataType::kInt32;
  if (kind == 'i' && size == 8) return DataType::kInt64;
  if (kind == 'u' && size == 1) return DataType::kUInt8;
  if (kind == 'b' && size == 1) return DataType::kBool;
  throw InvalidArgument(what + ": unsupported dtype " + dtype.attr("name").cast<std::string>() +
                        " (kolo takes " + kSupported + " arrays; convert with .astype())");
}

// array as the engine sees it (its memory, not owned: the ArrayHandle keeps
// the array alive).
TensorRef tensorOf(const py::array& array, const Request& request) {
  const std::string what = std::string(toString(request.op)) + " '" + request.name + "'";
  KOLO_CHECK_ARG(array.flags() & py::array::c_style,
                 what + ": the array is not C-contiguous (pass numpy.ascontiguousarray(a))");
  TensorRef t;
  t.dtype = dataTypeOf(array.dtype(), what);
  t.shape.assign(array.shape(), array.shape() + array.ndim());
  t.data = const_cast<void*>(array.data());
  return t;
}

// What an operation writes: memory of the input's shape, or memory the
// engine allocates once the ranks agreed on the shape.
enum class Output { kSameShape, kNegotiated };

OutputSpec outputFor(const TensorRef& input, Output output) {
  if (output == Output::kSameShape)
    return OutputSpec::intoTensor(hostAllocator(input.dtype)(input.shape));
  return OutputSpec::negotiated(hostAllocator(input.dtype));
}

// A submitted operation on one array.
class ArrayHandle {
 public:
  ArrayHandle(TensorOp op, py::array input) : op_(std::move(op)), input_(std::move(input)) {}

  ArrayHandle(const ArrayHandle&) = delete;
  ArrayHandle& operator=(const ArrayHandle&) = delete;

  // Runs with the GIL (Python drops the handle): waits without it, so the
  // input outlives the engine's reads of it.
  ~ArrayHandle() {
    if (op_.handle().poll()) return;
    py::gil_scoped_release release;
    try {
      op_.handle().wait();
    } catch (const std::exception&) {
      // The operation's error belongs to whoever waits on it; nobody does.
    }
  }

  // True once the operation ended (successfully or not).
  bool poll() const { return op_.handle().poll(); }

  // Blocks until done; the result as a new NumPy array over the output's
  // memory (which it owns from then on), or the operation's error raised.
  py::array wait() {
    {
      py::gil_scoped_release release;
      op_.handle().wait();
    }
    const TensorRef out = op_.output();
    auto* keep = new std::shared_ptr<void>(out.keepAlive);
    py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
    std::vector<py::ssize_t> shape(out.shape.begin(), out.shape.end());
    return py::array(input_.dtype(), shape, {}, out.data, owner);
  }

  // alltoall: rows received from each rank of the set; allgather: rows each
  // rank contributed (after wait()).
  std::vector<int64_t> receivedSplits() const { return op_.handle().receivedSplits(); }

 private:
  TensorOp op_;
  py::array input_;  // the input's memory, read by the engine until done
};

std::unique_ptr<ArrayHandle> submitArray(Request request, const py::array& array, Output output) {
  TensorRef input = tensorOf(array, request);
  OutputSpec spec = outputFor(input, output);
  TensorOp op;
  {
    py::gil_scoped_release release;
    op = kolo::submit(kolo::defaultEngine(), std::move(request), std::move(input), std::move(spec));
  }
  return std::make_unique<ArrayHandle>(std::move(op), array);
}

// One request per array ("<base>.<i>", each a copy of prototype),
// negotiated as a group.
std::vector<std::unique_ptr<ArrayHandle>> submitArrays(const std::vector<py::array>& arrays,
                                                       const Request& prototype, Output output) {
  KOLO_CHECK_ARG(!arrays.empty(), std::string("grouped_") + toString(prototype.op) +
                                      ": no arrays (pass a non-empty list)");
  std::vector<Request> requests;
  std::vector<TensorRef> inputs;
  std::vector<OutputSpec> outputs;
  for (size_t i = 0; i < arrays.size(); ++i) {
    requests.push_back(prototype);
    requests.back().name = groupMemberName(prototype.name, i);
    inputs.push_back(tensorOf(arrays[i], requests.back()));
    outputs.push_back(outputFor(inputs.back(), output));
  }
  std::vector<TensorOp> ops;
  {
    py::gil_scoped_release release;
    ops = kolo::submitGroup(kolo::defaultEngine(), std::move(requests), std::move(inputs),
                            std::move(outputs));
  }
  std::vector<std::unique_ptr<ArrayHandle>> out;
  for (size_t i = 0; i < arrays.size(); ++i)
    out.push_back(std::make_unique<ArrayHandle>(std::move(ops[i]), arrays[i]));
  return out;
}

// name, or the engine's next generated one for op in the set.
std::string nameOf(const std::string& name, const char* op, int set) {
  return kolo::defaultEngine().nameOrNext(name, op, set);
}

}  // namespace

void bindArrays(py::module_& m) {
  py::enum_<ReduceOp>(m, "ReduceOp", "How a reduction combines the ranks' data (the op= argument).")
      .value("Sum", ReduceOp::kSum, "Elementwise sum.")
      .value("Average", ReduceOp::kAverage,
             "Sum divided by the number of ranks in the process set (integers: truncated).")
      .value("Min", ReduceOp::kMin, "Elementwise minimum.")
      .value("Max", ReduceOp::kMax, "Elementwise maximum.")
      .value("Product", ReduceOp::kProduct, "Elementwise product.")
      .value("Adasum", ReduceOp::kAdasum,
             "Adaptive summation: allreduce of floating-point data only.");

  py::class_<ArrayHandle>(m, "ArrayHandle",
                          "Completion of one asynchronous operation on an array. Dropping it "
                          "before the operation ends waits for the operation.")
      .def("poll", &ArrayHandle::poll, "True once the operation finished (successfully or not).")
      .def("wait", &ArrayHandle::wait,
           "Blocks until done (without the GIL); returns the result as a new NumPy array or "
           "raises the operation's error.")
      .def("received_splits", &ArrayHandle::receivedSplits,
           "alltoall: rows received from each rank (after wait()).");

  // Every operation takes the process set's id last (0: every rank); the
  // arrays are C-contiguous NumPy arrays (kolo/common/arrays.py makes them).
  m.def(
      "array_allreduce_async",
      [](const py::array& a, ReduceOp op, const std::string& name, double prescale,
         double postscale, int set) {
        return submitArray(
            allreduceRequest(nameOf(name, "allreduce", set), op, prescale, postscale, set), a,
            Output::kSameShape);
      },
      py::arg("array"), py::arg("op"), py::arg("name"), py::arg("prescale"), py::arg("postscale"),
      py::arg("process_set"));
  m.def(
      "array_grouped_allreduce_async",
      [](const std::vector<py::array>& arrays, ReduceOp op, const std::string& name,
         double prescale, double postscale, int set) {
        return submitArrays(
            arrays,
            allreduceRequest(nameOf(name, "grouped_allreduce", set), op, prescale, postscale, set),
            Output::kSameShape);
      },
      py::arg("arrays"), py::arg("op"), py::arg("name"), py::arg("prescale"), py::arg("postscale"),
      py::arg("process_set"));
  m.def(
      "array_allgather_async",
      [](const py::array& a, const std::string& name, int set) {
        return submitArray(allgatherRequest(nameOf(name, "allgather", set), set), a,
                           Output::kNegotiated);
      },
      py::arg("array"), py::arg("name"), py::arg("process_set"));
  m.def(
      "array_grouped_allgather_async",
      [](const std::vector<py::array>& arrays, const std::string& name, int set) {
        return submitArrays(arrays, allgatherRequest(nameOf(name, "grouped_allgather", set), set),
                            Output::kNegotiated);
      },
      py::arg("arrays"), py::arg("name"), py::arg("process_set"));
  m.def(
      "array_broadcast_async",
      [](const py::array& a, int root, const std::string& name, int set) {
        return submitArray(broadcastRequest(nameOf(name, "broadcast", set), root, set), a,
                           Output::kSameShape);
      },
      py::arg("array"), py::arg("root"), py::arg("name"), py::arg("process_set"));
  m.def(
      "array_alltoall_async",
      [](const py::array& a, const std::vector<int64_t>& splits, const std::string& name, int set) {
        return submitArray(alltoallRequest(nameOf(name, "alltoall", set), splits, set), a,
                           Output::kNegotiated);
      },
      py::arg("array"), py::arg("splits"), py::arg("name"), py::arg("process_set"));
  m.def(
      "array_reducescatter_async",
      [](const py::array& a, ReduceOp op, const std::string& name, double prescale,
         double postscale, int set) {
        return submitArray(
            reducescatterRequest(nameOf(name, "reducescatter", set), op, prescale, postscale, set),
            a, Output::kNegotiated);
      },
      py::arg("array"), py::arg("op"), py::arg("name"), py::arg("prescale"), py::arg("postscale"),
      py::arg("process_set"));
  m.def(
      "array_grouped_reducescatter_async",
      [](const std::vector<py::array>& arrays, ReduceOp op, const std::string& name,
         double prescale, double postscale, int set) {
        return submitArrays(arrays,
                            reducescatterRequest(nameOf(name, "grouped_reducescatter", set), op,
                                                 prescale, postscale, set),
                            Output::kNegotiated);
      },
      py::arg("arrays"), py::arg("op"), py::arg("name"), py::arg("prescale"), py::arg("postscale"),
      py::arg("process_set"));

  // bytes in, bytes out: the payload must not go through str conversion.
  m.def(
      "broadcast_bytes",
      [](const std::string& bytes, int root, const std::string& name, int set) {
        std::string out;
        {
          py::gil_scoped_release release;
          out = kolo::broadcastObject(kolo::defaultEngine(), bytes, root,
                                      nameOf(name, "broadcast_object", set), set);
        }
        return py::bytes(out);
      },
      py::arg("data"), py::arg("root"), py::arg("name"), py::arg("process_set"),
      "root's bytes on every rank of the set (blocks).");
  m.def(
      "allgather_bytes",
      [](const std::string& bytes, const std::string& name, int set) {
        std::vector<std::string> all;
        {
          py::gil_scoped_release release;
          all = kolo::allgatherObject(kolo::defaultEngine(), bytes,
                                      nameOf(name, "allgather_object", set), set);
        }
        py::list out;
        for (const std::string& b : all) out.append(py::bytes(b));
        return out;
      },
      py::arg("data"), py::arg("name"), py::arg("process_set"),
      "Every rank's bytes, in the set's rank order (blocks).");
}

}  // namespace kolo::python
