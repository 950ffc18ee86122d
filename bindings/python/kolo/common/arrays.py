"""Collectives on arrays, without a framework: ``kolo.allreduce`` and friends.

They take NumPy arrays, or any host array that offers DLPack
(``__dlpack__``) or the buffer protocol, and return new NumPy arrays. The
signatures, op names and defaults are horovod.torch's (``op`` defaults to
Average), as are the process sets (``process_set=``; roots are ranks of the
job) and the errors: a KoloInvalidArgumentError (a ValueError) for a
rejected argument or dtype, KoloMismatchError when ranks disagree,
KoloInternalError when a peer fails.

Supported dtypes: float16, float32, float64, int8, int16, int32, int64,
uint8 and bool (bool: the operations that move data, and Min/Max/Sum/
Product as the engine allows). Non-contiguous arrays and arrays in a
foreign byte order are copied first.

Ranks match operations by name; an unnamed operation gets the engine's
next generated name (``noname.<op>.<n>``, counted per process set, one
sequence shared with kolo.torch), so unnamed operations must be issued in
the same order on every rank.
"""
import io
import pickle

import numpy as np

from kolo import _kolo
from kolo.common._args import _as_int, _check_op, _name, _rank_arg, _resolve_op, _scale, _sid
from kolo.common.process_sets import global_process_set

try:  # Horovod pickles objects with cloudpickle (lambdas, local classes)
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - depends on the environment
    _pickler = pickle

ReduceOp = _kolo.ReduceOp
"""How a reduction combines the ranks' arrays (the ``op=`` argument)."""
Average = ReduceOp.Average
"""Sum over the ranks of the process set divided by their number (integers:
truncated). The default op."""
Sum = ReduceOp.Sum
"""Elementwise sum over the ranks."""
Min = ReduceOp.Min
"""Elementwise minimum over the ranks."""
Max = ReduceOp.Max
"""Elementwise maximum over the ranks."""
Product = ReduceOp.Product
"""Elementwise product over the ranks."""
Adasum = ReduceOp.Adasum
"""Adaptive summation (Maleki et al.): allreduce of floating-point arrays."""

_DLPACK_CPU = 1  # DLDeviceType kDLCPU


def _as_array(value, fn, what="tensor"):
    """value as a C-contiguous, native-byte-order NumPy array (a copy only
    where it is not one already)."""
    if isinstance(value, np.ndarray):
        array = value
    elif hasattr(value, "__dlpack__"):
        device = getattr(value, "__dlpack_device__", None)
        kind = device()[0] if device is not None else _DLPACK_CPU
        if int(kind) != _DLPACK_CPU:
            raise ValueError("%s: %s is in device memory (DLPack device type %d); the array "
                             "API takes host memory: copy it to the CPU first, or use the "
                             "framework's own kolo module (kolo.torch)" % (fn, what, int(kind)))
        try:
            array = np.from_dlpack(value)
        except (TypeError, BufferError, RuntimeError, ValueError) as e:
            if not hasattr(value, "__array__"):
                raise ValueError("%s: %s offers DLPack, but NumPy cannot read it (%s)"
                                 % (fn, what, e)) from None
            array = np.asarray(value)
    else:
        try:
            array = np.asarray(memoryview(value))
        except TypeError:
            raise ValueError("%s: %s must be an array (NumPy, DLPack or the buffer protocol), "
                             "got %s; wrap lists and scalars in numpy.asarray()"
                             % (fn, what, type(value).__name__)) from None
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    # (np.ascontiguousarray would make a 0-d array 1-d.)
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


def _as_arrays(values, fn):
    if isinstance(values, (np.ndarray, str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise ValueError("%s: tensors must be a list of arrays, got %s"
                         % (fn, "one array (wrap it in a list)"
                            if isinstance(values, np.ndarray) else type(values).__name__))
    return [_as_array(v, fn, "tensors[%d]" % i) for i, v in enumerate(values)]


class Handle:
    """An operation in flight: ``kolo.synchronize(handle)`` (or
    ``handle.wait()``) returns its result, ``kolo.poll(handle)`` says whether
    it finished. Dropping it before then waits for the operation."""

    def __init__(self, handles, single, splits=False):
        self._handles = handles  # _kolo.ArrayHandle objects
        self._single = single
        self._splits = splits  # alltoall with splits: (array, received_splits)

    def poll(self):
        """True once the operation finished (successfully or not)."""
        return all(h.poll() for h in self._handles)

    def wait(self):
        """Blocks until done; the result, or the operation's error raised."""
        out = [h.wait() for h in self._handles]
        if self._splits:
            return out[0], np.asarray(self._handles[0].received_splits(), dtype=np.int32)
        return out[0] if self._single else out


def synchronize(handle):
    """Waits for handle (from an ``*_async`` call) and returns its result."""
    if not isinstance(handle, Handle):
        raise ValueError("kolo.synchronize: expected a handle from a kolo *_async call, got %s"
                         % type(handle).__name__)
    return handle.wait()


def poll(handle):
    """True once handle's operation finished; never blocks."""
    if not isinstance(handle, Handle):
        raise ValueError("kolo.poll: expected a handle from a kolo *_async call, got %s"
                         % type(handle).__name__)
    return handle.poll()


# ---- reductions -----------------------------------------------------------------


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts allreduce() and returns a Handle at once. Leave the array
    unchanged until the handle completes: kolo reads it meanwhile."""
    fn = "kolo.allreduce"
    op = _resolve_op(op, average, fn)
    return Handle([_kolo.array_allreduce_async(
        _as_array(tensor, fn), op, _name(name), _scale(prescale_factor, fn, "prescale_factor"),
        _scale(postscale_factor, fn, "postscale_factor"), _sid(process_set))], True)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """The elementwise reduction of every rank's array (same shape and dtype
    on every rank of the set), as a new NumPy array.

    Args:
        tensor: this rank's array (NumPy, DLPack or buffer protocol).
        average (bool): deprecated; True is op=Average, False op=Sum.
        name (str): the name ranks match the operation by; None takes the
            next generated one.
        op (ReduceOp): Average (default), Sum, Min, Max, Product or Adasum.
        prescale_factor (float): multiplied in before the reduction.
        postscale_factor (float): multiplied in after it.
        process_set (ProcessSet): the ranks that take part (default: all).

    Raises:
        ValueError: op and average both given, op is not a ReduceOp, or
            tensor is not an array.
        KoloInvalidArgumentError: (a ValueError) an unsupported dtype, a
            rank outside process_set, a name in flight already.
        KoloMismatchError: (a ValueError) the ranks disagree (dtype, shape,
            op, scale factors).
        KoloInternalError: a peer failed, timed out or shut down.
    """
    return allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                           process_set).wait()


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts grouped_allreduce() and returns a Handle at once."""
    fn = "kolo.grouped_allreduce"
    op = _resolve_op(op, average, fn)
    return Handle(_kolo.array_grouped_allreduce_async(
        _as_arrays(tensors, fn), op, _name(name), _scale(prescale_factor, fn, "prescale_factor"),
        _scale(postscale_factor, fn, "postscale_factor"), _sid(process_set)), False)


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """allreduce() of each array of a list, negotiated and fused as one
    group; a list of new arrays. Arguments as allreduce()."""
    return grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                   postscale_factor, process_set).wait()


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducescatter() and returns a Handle at once."""
    fn = "kolo.reducescatter"
    return Handle([_kolo.array_reducescatter_async(
        _as_array(tensor, fn), _check_op(op, fn), _name(name),
        _scale(prescale_factor, fn, "prescale_factor"),
        _scale(postscale_factor, fn, "postscale_factor"), _sid(process_set))], True)


def reducescatter(tensor, name=None, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces every rank's array (op: Average by default, Sum, Min, Max,
    Product) and returns this rank's share of the first dimension (the
    first ``shape[0] % size`` ranks of the set get one row more), as
    horovod.torch.reducescatter."""
    return reducescatter_async(tensor, name, op, process_set, prescale_factor,
                               postscale_factor).wait()


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts grouped_reducescatter() and returns a Handle at once."""
    fn = "kolo.grouped_reducescatter"
    return Handle(_kolo.array_grouped_reducescatter_async(
        _as_arrays(tensors, fn), _check_op(op, fn), _name(name),
        _scale(prescale_factor, fn, "prescale_factor"),
        _scale(postscale_factor, fn, "postscale_factor"), _sid(process_set)), False)


def grouped_reducescatter(tensors, name=None, op=Average, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter() of each array of a list, as one group."""
    return grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                       postscale_factor).wait()


# ---- data movement ------------------------------------------------------------


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts allgather() and returns a Handle at once."""
    fn = "kolo.allgather"
    return Handle([_kolo.array_allgather_async(_as_array(tensor, fn), _name(name),
                                               _sid(process_set))], True)


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's rows concatenated along the first dimension, in the set's
    rank order (first dimensions may differ between ranks, the others and
    the dtype may not)."""
    return allgather_async(tensor, name, process_set).wait()


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts grouped_allgather() and returns a Handle at once."""
    fn = "kolo.grouped_allgather"
    return Handle(_kolo.array_grouped_allgather_async(_as_arrays(tensors, fn), _name(name),
                                                      _sid(process_set)), False)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather() of each array of a list, as one group."""
    return grouped_allgather_async(tensors, name, process_set).wait()


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcast() and returns a Handle at once."""
    fn = "kolo.broadcast"
    return Handle([_kolo.array_broadcast_async(_as_array(tensor, fn),
                                               _rank_arg(root_rank, fn), _name(name),
                                               _sid(process_set))], True)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's array (a rank of the job, a member of the set) on every
    rank of the set, as a new array; every rank passes an array of the
    same shape and dtype."""
    return broadcast_async(tensor, root_rank, name, process_set).wait()


def _splits(splits, fn):
    if splits is None:
        return []
    if isinstance(splits, (str, bytes, dict)) or not hasattr(splits, "__iter__"):
        raise ValueError("%s: splits must be a 1-d integer array or a list of ints, got %s"
                         % (fn, type(splits).__name__))
    if isinstance(splits, np.ndarray):
        if splits.dtype.kind not in "iu":
            raise ValueError("%s: splits must hold integers, got a %s array" % (fn, splits.dtype))
        if splits.ndim != 1:
            raise ValueError("%s: splits must be 1-d, got shape %s" % (fn, splits.shape))
    out = []
    for i, s in enumerate(splits):
        n = _as_int(s)
        if n is None:
            raise ValueError("%s: splits[%d] must be an int, got %r" % (fn, i, s))
        if n < 0:
            raise ValueError("%s: splits[%d] = %d is negative" % (fn, i, n))
        out.append(n)
    return out


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts alltoall() and returns a Handle at once."""
    fn = "kolo.alltoall"
    return Handle([_kolo.array_alltoall_async(_as_array(tensor, fn), _splits(splits, fn),
                                              _name(name), _sid(process_set))], True,
                  splits is not None)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[j] rows (first dimension) to the set's rank j and
    receives theirs, in the set's rank order. splits=None splits evenly
    (shape[0] must divide by the set's size). With splits given, returns
    (array, received_splits) as horovod.torch, received_splits an int32
    array of the rows from each rank."""
    return alltoall_async(tensor, splits, name, process_set).wait()


# ---- control and objects -------------------------------------------------------


def barrier(process_set=global_process_set):
    """Blocks until every rank of the set reached it."""
    _kolo.barrier(_sid(process_set))


def join(device=-1, process_set=global_process_set):
    """This rank has no more data: until every rank of the set joined, it
    takes part in the set's operations with a neutral contribution. device is
    accepted for Horovod compatibility and ignored. Returns the last rank
    (of the job) to join."""
    del device
    return _kolo.join(_sid(process_set))


def _dumps(obj):
    buf = io.BytesIO()
    _pickler.dump(obj, buf, protocol=pickle.HIGHEST_PROTOCOL)
    return buf.getvalue()


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's obj (pickled, cloudpickle when installed) on every rank of
    the set; root_rank gets obj itself back."""
    root_rank = _rank_arg(root_rank, "kolo.broadcast_object")
    is_root = _kolo.rank() == root_rank
    received = _kolo.broadcast_bytes(_dumps(obj) if is_root else b"", root_rank, _name(name),
                                     _sid(process_set))
    return obj if is_root else pickle.load(io.BytesIO(received))


def allgather_object(obj, name=None, process_set=global_process_set):
    """The list of every rank's obj (pickled; sizes may differ), in the
    set's rank order; two allgathers named ``<name>.size`` and
    ``<name>.data``."""
    gathered = _kolo.allgather_bytes(_dumps(obj), _name(name), _sid(process_set))
    return [pickle.loads(b) for b in gathered]


__all__ = [
    "Adasum", "Average", "Handle", "Max", "Min", "Product", "ReduceOp", "Sum",
    "allgather", "allgather_async", "allgather_object", "allreduce", "allreduce_async",
    "alltoall", "alltoall_async", "barrier", "broadcast", "broadcast_async",
    "broadcast_object", "grouped_allgather", "grouped_allgather_async", "grouped_allreduce",
    "grouped_allreduce_async", "grouped_reducescatter", "grouped_reducescatter_async", "join",
    "poll", "reducescatter", "reducescatter_async", "synchronize",
]
