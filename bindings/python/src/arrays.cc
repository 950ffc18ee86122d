// The collectives on arrays, without a framework: what kolo.allreduce,
// kolo.allgather and the others (kolo/common/arrays.py) run on the default
// engine. Inputs are C-contiguous NumPy arrays in host memory (the Python
// layer converts DLPack and buffer-protocol objects and copies
// non-contiguous ones); outputs are new NumPy arrays over memory the
// engine wrote.
//
// Lifetime: an ArrayHandle keeps its input array alive and, if it is
// dropped before the operation ends, waits for it (without the GIL): the
// engine reads the input until then. Output memory is a Buffer shared by
// the engine's callbacks and by the NumPy arrays made from it, so no
// Python object is touched off the Python threads.
//
// GIL: every call that enqueues or waits releases it.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
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

using Release = py::call_guard<py::gil_scoped_release>;

// Memory an output is written into; its shape is known at enqueue
// (allreduce, broadcast) or set by the allocator on the engine's thread
// once negotiated (allgather, alltoall, reducescatter), before the handle
// completes.
struct Buffer {
  std::unique_ptr<char[]> bytes;
  std::vector<int64_t> shape;

  // Allocates room for shape (at least one byte, so that the pointer of an
  // empty output is not null).
  void* allocate(const std::vector<int64_t>& newShape, size_t elementBytes) {
    shape = newShape;
    const auto n = static_cast<size_t>(numElements(shape)) * elementBytes;
    bytes.reset(new char[std::max<size_t>(n, 1)]);
    return bytes.get();
  }
};

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

// A submitted operation on one array.
class ArrayHandle {
 public:
  ArrayHandle(kolo::Handle handle, py::object input, py::dtype dtype,
              std::shared_ptr<Buffer> output)
      : handle_(std::move(handle)),
        input_(std::move(input)),
        dtype_(std::move(dtype)),
        output_(std::move(output)) {}

  ArrayHandle(const ArrayHandle&) = delete;
  ArrayHandle& operator=(const ArrayHandle&) = delete;

  // Runs with the GIL (Python drops the handle): waits without it, so the
  // input outlives the engine's reads of it.
  ~ArrayHandle() {
    if (!handle_.valid() || handle_.poll()) return;
    py::gil_scoped_release release;
    try {
      handle_.wait();
    } catch (const std::exception&) {
      // The operation's error belongs to whoever waits on it; nobody does.
    }
  }

  // True once the operation ended (successfully or not).
  bool poll() const { return handle_.poll(); }

  // Blocks until done; the result as a new NumPy array, or the operation's
  // error raised.
  py::array wait() {
    {
      py::gil_scoped_release release;
      handle_.wait();
    }
    auto* keep = new std::shared_ptr<Buffer>(output_);
    py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<Buffer>*>(p); });
    std::vector<py::ssize_t> shape(output_->shape.begin(), output_->shape.end());
    return py::array(dtype_, shape, {}, output_->bytes.get(), owner);
  }

  // alltoall: rows received from each rank of the set; allgather: rows each
  // rank contributed (after wait()).
  std::vector<int64_t> receivedSplits() const { return handle_.receivedSplits(); }

 private:
  kolo::Handle handle_;
  py::object input_;  // the input's memory, read by the engine until done
  py::dtype dtype_;
  std::shared_ptr<Buffer> output_;
};

// What an operation writes: a buffer of the input's shape, or one the
// engine allocates once the ranks agreed on the shape.
enum class Output { kSameShape, kNegotiated };

// Fills request's description of array and entry's memory; the Buffer the
// output goes to.
std::shared_ptr<Buffer> prepare(const py::array& array, Output output, Request& request,
                                Entry& entry) {
  const std::string what = std::string(toString(request.op)) + " '" + request.name + "'";
  KOLO_CHECK_ARG(array.flags() & py::array::c_style,
                 what + ": the array is not C-contiguous (pass numpy.ascontiguousarray(a))");
  request.dtype = dataTypeOf(array.dtype(), what);
  request.shape.assign(array.shape(), array.shape() + array.ndim());
  request.device = DeviceKind::kCpu;
  request.deviceIndex = -1;
  entry.input = array.data();
  auto buffer = std::make_shared<Buffer>();
  const size_t elementBytes = elementSize(request.dtype);
  if (output == Output::kSameShape) {
    entry.output = buffer->allocate(request.shape, elementBytes);
  } else {
    entry.allocate = [buffer, elementBytes](const std::vector<int64_t>& shape) {
      return buffer->allocate(shape, elementBytes);
    };
  }
  // The engine's callbacks hold the buffer until the operation ends, even
  // once no handle does.
  entry.onDone = [buffer](const Status&) {};
  return buffer;
}

std::unique_ptr<ArrayHandle> submit(Request request, const py::array& array, Output output) {
  Entry entry;
  auto buffer = prepare(array, output, request, entry);
  kolo::Handle handle;
  {
    py::gil_scoped_release release;
    handle = kolo::defaultEngine().enqueue(std::move(request), std::move(entry));
  }
  return std::make_unique<ArrayHandle>(std::move(handle), array, array.dtype(), std::move(buffer));
}

// One request per array ("<base>.<i>", each a copy of prototype),
// negotiated as a group.
std::vector<std::unique_ptr<ArrayHandle>> submitGroup(const std::vector<py::array>& arrays,
                                                      const Request& prototype,
                                                      const std::string& base, Output output) {
  KOLO_CHECK_ARG(!arrays.empty(), std::string("grouped_") + toString(prototype.op) +
                                      ": no arrays (pass a non-empty list)");
  std::vector<Request> requests;
  std::vector<Entry> entries;
  std::vector<std::shared_ptr<Buffer>> buffers;
  for (size_t i = 0; i < arrays.size(); ++i) {
    requests.push_back(prototype);
    requests.back().name = base + "." + std::to_string(i);
    entries.emplace_back();
    buffers.push_back(prepare(arrays[i], output, requests.back(), entries.back()));
  }
  std::vector<kolo::Handle> handles;
  {
    py::gil_scoped_release release;
    handles = kolo::defaultEngine().enqueueGroup(std::move(requests), std::move(entries));
  }
  std::vector<std::unique_ptr<ArrayHandle>> out;
  for (size_t i = 0; i < arrays.size(); ++i)
    out.push_back(std::make_unique<ArrayHandle>(handles[i], arrays[i], arrays[i].dtype(),
                                                std::move(buffers[i])));
  return out;
}

Request reduction(OpType op, const std::string& name, const char* key, ReduceOp reduceOp,
                  double prescale, double postscale, int set) {
  Request r;
  r.name = kolo::defaultEngine().nameOrNext(name, key, set);
  r.op = op;
  r.reduceOp = reduceOp;
  r.prescale = prescale;
  r.postscale = postscale;
  r.processSet = set;
  return r;
}

Request rooted(OpType op, const std::string& name, const char* key, int root, int set) {
  Request r;
  r.name = kolo::defaultEngine().nameOrNext(name, key, set);
  r.op = op;
  r.root = root;
  r.processSet = set;
  return r;
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
        return submit(
            reduction(OpType::kAllreduce, name, "allreduce", op, prescale, postscale, set), a,
            Output::kSameShape);
      },
      py::arg("array"), py::arg("op"), py::arg("name"), py::arg("prescale"), py::arg("postscale"),
      py::arg("process_set"));
  m.def(
      "array_grouped_allreduce_async",
      [](const std::vector<py::array>& arrays, ReduceOp op, const std::string& name,
         double prescale, double postscale, int set) {
        const std::string base = kolo::defaultEngine().nameOrNext(name, "grouped_allreduce", set);
        return submitGroup(arrays,
                           reduction(OpType::kAllreduce, base, "", op, prescale, postscale, set),
                           base, Output::kSameShape);
      },
      py::arg("arrays"), py::arg("op"), py::arg("name"), py::arg("prescale"), py::arg("postscale"),
      py::arg("process_set"));
  m.def(
      "array_allgather_async",
      [](const py::array& a, const std::string& name, int set) {
        return submit(rooted(OpType::kAllgather, name, "allgather", 0, set), a,
                      Output::kNegotiated);
      },
      py::arg("array"), py::arg("name"), py::arg("process_set"));
  m.def(
      "array_grouped_allgather_async",
      [](const std::vector<py::array>& arrays, const std::string& name, int set) {
        const std::string base = kolo::defaultEngine().nameOrNext(name, "grouped_allgather", set);
        return submitGroup(arrays, rooted(OpType::kAllgather, base, "", 0, set), base,
                           Output::kNegotiated);
      },
      py::arg("arrays"), py::arg("name"), py::arg("process_set"));
  m.def(
      "array_broadcast_async",
      [](const py::array& a, int root, const std::string& name, int set) {
        return submit(rooted(OpType::kBroadcast, name, "broadcast", root, set), a,
                      Output::kSameShape);
      },
      py::arg("array"), py::arg("root"), py::arg("name"), py::arg("process_set"));
  m.def(
      "array_alltoall_async",
      [](const py::array& a, const std::vector<int64_t>& splits, const std::string& name, int set) {
        Request r = rooted(OpType::kAlltoall, name, "alltoall", 0, set);
        r.splits = splits;
        return submit(std::move(r), a, Output::kNegotiated);
      },
      py::arg("array"), py::arg("splits"), py::arg("name"), py::arg("process_set"));
  m.def(
      "array_reducescatter_async",
      [](const py::array& a, ReduceOp op, const std::string& name, double prescale,
         double postscale, int set) {
        return submit(
            reduction(OpType::kReducescatter, name, "reducescatter", op, prescale, postscale, set),
            a, Output::kNegotiated);
      },
      py::arg("array"), py::arg("op"), py::arg("name"), py::arg("prescale"), py::arg("postscale"),
      py::arg("process_set"));
  m.def(
      "array_grouped_reducescatter_async",
      [](const std::vector<py::array>& arrays, ReduceOp op, const std::string& name,
         double prescale, double postscale, int set) {
        const std::string base =
            kolo::defaultEngine().nameOrNext(name, "grouped_reducescatter", set);
        return submitGroup(
            arrays, reduction(OpType::kReducescatter, base, "", op, prescale, postscale, set), base,
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
          Engine& engine = kolo::defaultEngine();
          out = kolo::broadcastObject(engine, bytes, root,
                                      engine.nameOrNext(name, "broadcast_object", set), set);
        }
        return py::bytes(out);
      },
      py::arg("data"), py::arg("root"), py::arg("name"), py::arg("process_set"),
      "root's bytes on every rank of the set (blocks).");
}

}  // namespace kolo::python
