"""Tensor collectives with horovod.torch's signatures.

Every operation goes to the C++ engine through the LibTorch adapter
(``kolo._kolo``); this module only adapts arguments, wraps handles and adds
autograd. Ranks match operations by name: an unnamed operation gets the
adapter's next generated name (``noname.<op>.<n>``, counted per process
set), so unnamed operations must be issued in the same order on every rank.

Every operation takes ``process_set=`` (default: every rank) and then runs
among that set's ranks only; ``root_rank`` is a rank of the job.

The blocking, out-of-place operations (allreduce, grouped_allreduce,
allgather, grouped_allgather, broadcast, alltoall, reducescatter,
grouped_reducescatter) are differentiable, with horovod.torch's gradient
conventions; the in-place and asynchronous ones are not.
"""
import operator
import warnings

import torch

from kolo import _kolo
from kolo.torch.compression import Compression
from kolo.torch.process_sets import _id, global_process_set

ReduceOp = _kolo.ReduceOp
"""How a reduction combines the ranks' tensors (the ``op=`` argument)."""
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
Adasum = ReduceOp.Adasum  # allreduce of floating tensors only (docs/guides/adasum.md)
"""Adaptive summation (Maleki et al.): for allreduce of floating-point
tensors on the CPU only (CUDA tensors raise KoloInvalidArgumentError)."""


def _name(name):
    return "" if name is None else str(name)


_INT32_MAX = 2 ** 31 - 1
_INT64_MAX = 2 ** 63 - 1


def _kind(value):
    return "%s %r" % (type(value).__name__, value) if not isinstance(value, torch.Tensor) \
        else "a tensor"


def _tensor(tensor, fn, what="tensor"):
    """tensor, checked to be a torch.Tensor."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError("kolo.torch.%s: %s must be a torch.Tensor, got %s"
                         % (fn, what, _kind(tensor)))
    return tensor


def _tensor_list(tensors, fn):
    """tensors as a list, checked to hold torch.Tensors only."""
    if (isinstance(tensors, (torch.Tensor, str, bytes, dict))
            or not hasattr(tensors, "__iter__")):
        raise ValueError("kolo.torch.%s: tensors must be a list of torch.Tensor, got %s"
                         % (fn, _kind(tensors) if not isinstance(tensors, torch.Tensor)
                            else "one tensor (wrap it in a list)"))
    out = list(tensors)
    for i, t in enumerate(out):
        _tensor(t, fn, "tensors[%d]" % i)
    return out


def _scale(value, fn, what):
    """A scale factor as a float (ints, floats, numpy and 0-d tensors)."""
    if not isinstance(value, (str, bytes)):
        try:
            return float(value)
        except (TypeError, ValueError, RuntimeError):
            pass
    raise ValueError("kolo.torch.%s: %s must be a number, got %s" % (fn, what, _kind(value)))


def _as_int(value):
    """value as an int (ints, numpy ints, 0-d integer tensors), None for
    anything else, bools included."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _rank_arg(value, fn, what="root_rank"):
    """A rank of the job as an int (ints, numpy ints, 0-d integer tensors)."""
    rank = _as_int(value)
    if rank is None:
        raise ValueError("kolo.torch.%s: %s must be an int rank, got %s"
                         % (fn, what, _kind(value)))
    if not 0 <= rank <= _INT32_MAX:
        raise ValueError("kolo.torch.%s: %s=%d is not a rank (ranks are 0 .. size-1)"
                         % (fn, what, rank))
    return rank


def _count(value, fn, what, minimum=1):
    """A count (an int >= minimum: ints, numpy ints, 0-d integer tensors)."""
    count = _as_int(value)
    if count is None:
        raise ValueError("kolo.torch.%s: %s must be an int >= %d, got %s"
                         % (fn, what, minimum, _kind(value)))
    if not minimum <= count <= _INT32_MAX:
        raise ValueError("kolo.torch.%s: %s must be an int >= %d, got %d"
                         % (fn, what, minimum, count))
    return count


def _sid(process_set):
    """The engine id of process_set (ValueError for anything else)."""
    set_id = _id(process_set)
    if not 0 <= set_id <= _INT32_MAX:
        raise ValueError("process_set id %d does not exist" % set_id)
    return set_id


def _check_compression(compression, fn):
    if not (hasattr(compression, "compress") and hasattr(compression, "decompress")):
        raise ValueError("kolo.torch.%s: compression must be a kolo.torch.Compression member "
                         "(Compression.none, fp16, bf16), got %s" % (fn, _kind(compression)))
    return compression


def _resolve_op(op, average):
    """op wins; the legacy average= flag maps to Average/Sum."""
    if op is not None and average is not None:
        raise ValueError("pass either op= or the deprecated average=, not both")
    if average is not None:
        warnings.warn("average= is deprecated: use op=kolo.torch.Average or Sum",
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    if op is None:
        return Average
    return _check_op(op)


def _check_op(op):
    if not isinstance(op, ReduceOp):
        raise ValueError("op must be one of kolo.torch.Average, Sum, Min, Max, Product, "
                         "Adasum; got %r" % (op,))
    return op


def _set_size(process_set):
    return len(_kolo.process_set_ranks(_id(process_set)))


def _set_rank(process_set):
    return _kolo.process_set_ranks(_id(process_set)).index(_kolo.rank())


class Handle:
    """An asynchronous operation in flight: ``poll()``, ``wait()``.

    ``kolo.torch.poll(handle)`` and ``kolo.torch.synchronize(handle)`` do the
    same. Waiting releases the GIL. The result is computed once; waiting
    again returns it again.
    """

    __slots__ = ("_handles", "_finish", "_result", "_done")

    def __init__(self, handles, finish):
        self._handles = handles  # list of _kolo.TensorHandle
        self._finish = finish    # (outputs, handles) -> result
        self._result = None
        self._done = False

    def poll(self):
        """True once the operation finished (successfully or not); never
        blocks."""
        return all(h.poll() for h in self._handles)

    def wait(self):
        """Blocks (without the GIL) until the operation finished.

        Returns:
            The operation's result (what the blocking variant returns).

        Raises:
            KoloMismatchError, KoloInvalidArgumentError, KoloInternalError:
                the operation's error, as the blocking variant raises it.
        """
        if not self._done:
            outputs = [h.wait() for h in self._handles]
            self._result = self._finish(outputs, self._handles)
            self._done = True
        return self._result


def _single(outputs, _handles):
    return outputs[0]


def _listed(outputs, _handles):
    return list(outputs)


def _check_handle(handle, fn):
    if not (hasattr(handle, "poll") and hasattr(handle, "wait")):
        raise ValueError("kolo.torch.%s: expected a handle returned by an *_async operation, "
                         "got %s" % (fn, _kind(handle)))
    return handle


def poll(handle):
    """True when the operation behind handle has finished."""
    return _check_handle(handle, "poll").poll()


def synchronize(handle):
    """Waits for handle and returns its result (raises the operation's error)."""
    return _check_handle(handle, "synchronize").wait()


def _copy_back(tensors):
    """finish() of in-place grouped operations: results into the inputs."""
    def finish(outputs, _h):
        with torch.no_grad():
            for target, out in zip(tensors, outputs):
                if out is not target:
                    target.copy_(out)
        return tensors
    return finish


# ---- allreduce ----------------------------------------------------------------


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts allreduce() and returns at once (not differentiable).

    Takes allreduce()'s arguments but compression. Leave tensor unchanged until
    the handle completes: kolo reads it while the operation runs.

    Returns:
        Handle: ``synchronize(handle)`` returns the reduced tensor (new).

    Raises:
        ValueError: op and average both given, or op is not a ReduceOp.
        KoloInvalidArgumentError: (a ValueError) a bad tensor, this rank
            outside process_set, or name in flight already. Errors of the
            negotiation and of peers come from synchronize().
    """
    op = _resolve_op(op, average)
    fn = "allreduce_async"
    return Handle([_kolo.allreduce_async(_tensor(tensor, fn), op, _name(name),
                                         _scale(prescale_factor, fn, "prescale_factor"),
                                         _scale(postscale_factor, fn, "postscale_factor"),
                                         False, _sid(process_set))], _single)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place allreduce and returns at once (not differentiable).

    Takes allreduce_async()'s arguments. The result is written into tensor when the
    handle completes; leave tensor alone until then.

    Returns:
        Handle: ``synchronize(handle)`` returns tensor, reduced.

    Raises what allreduce_async() raises.
    """
    op = _resolve_op(op, average)
    fn = "allreduce_async_"
    return Handle([_kolo.allreduce_async(_tensor(tensor, fn), op, _name(name),
                                         _scale(prescale_factor, fn, "prescale_factor"),
                                         _scale(postscale_factor, fn, "postscale_factor"),
                                         True, _sid(process_set))], _single)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce; returns tensor. Not differentiable.

    Takes allreduce()'s arguments but compression.

    Returns:
        torch.Tensor: tensor itself, holding the reduction.

    Raises:
        KoloInvalidArgumentError: (a ValueError) the tensor is rejected
            (undefined, sparse, an unsupported dtype or device), this rank
            is not in process_set, or the name is in flight already.
        KoloMismatchError: (a ValueError) the ranks disagree about the
            operation of this name (dtype, shape, op, root, ...).
        KoloInternalError: a peer failed, timed out or shut down.
    """
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _grad_name(name, suffix="grad"):
    return None if name is None else "%s.%s" % (name, suffix)


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, name, prescale, postscale, process_set):
        ctx.op, ctx.name, ctx.scales, ctx.process_set = op, name, (prescale, postscale), process_set
        result = synchronize(allreduce_async(tensor, name=name, op=op,
                                             prescale_factor=prescale,
                                             postscale_factor=postscale,
                                             process_set=process_set))
        if op in (Min, Max):
            ctx.save_for_backward(tensor, result)
        return result

    @staticmethod
    def backward(ctx, grad):
        prescale, postscale = ctx.scales
        ps = ctx.process_set
        if ctx.op in (Sum, Average, Adasum):
            # d(post * reduce(pre * x)) / dx_r: the same reduction of the grads
            # (Adasum: Horovod's convention, the Adasum of the grads).
            g = allreduce(grad.contiguous(), name=_grad_name(ctx.name), op=ctx.op,
                          prescale_factor=prescale, postscale_factor=postscale, process_set=ps)
        elif ctx.op in (Min, Max) and prescale == 1.0 and postscale == 1.0:
            # Subgradient: the ranks holding the extremum share the gradient.
            tensor, result = ctx.saved_tensors
            mask = (tensor == result).to(grad.dtype)
            total = allreduce(grad.contiguous(), name=_grad_name(ctx.name), op=Sum,
                              process_set=ps)
            ties = allreduce(mask, name=_grad_name(ctx.name, "ties"), op=Sum, process_set=ps)
            g = total * mask / ties.clamp(min=1)
        else:
            raise NotImplementedError(
                "kolo.torch.allreduce: no gradient for op=%s with these scale factors" % ctx.op)
        return g, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces tensor over the ranks of process_set; returns a new tensor.

    Differentiable: the gradient is the same reduction of the gradients
    (Min/Max: shared among the ranks that hold the extremum).

    Args:
        tensor (torch.Tensor): a dense CPU or CUDA tensor of float32/64,
            float16, bfloat16, int64/32/16, int8, uint8 or bool; the same
            shape and dtype on every rank. Non-contiguous tensors are copied.
        average (bool): deprecated (as in Horovod): True means Average,
            False Sum. Give op instead.
        name (str): the operation's name, the same on every rank; None takes
            the next generated name, so unnamed operations must come in the
            same order on every rank. Naming hot-loop operations lets kolo
            skip negotiation (response cache).
        compression: Compression.none, .fp16 or .bf16: floating tensors
            travel in that type and the result is cast back.
        op (ReduceOp): Average (default), Sum, Min, Max, Product or Adasum.
        prescale_factor (float): multiplies tensor before the reduction.
        postscale_factor (float): multiplies the result after it.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        torch.Tensor: the reduction, a new tensor of tensor's shape and dtype.

    Raises:
        ValueError: op and average both given, or op is not a ReduceOp.
        KoloInvalidArgumentError: (a ValueError) the tensor is rejected
            (undefined, sparse, an unsupported dtype or device, Average or
            scale factors on bool, Adasum on a non-float or CUDA tensor),
            this rank is not in process_set, or the name is in flight
            already.
        KoloMismatchError: (a ValueError) the ranks disagree about the
            operation of this name (dtype, shape, op, root, ...).
        KoloInternalError: a peer failed, timed out or shut down.
    """
    op = _resolve_op(op, average)
    _tensor(tensor, "allreduce")
    compressed, cctx = _check_compression(compression, "allreduce").compress(tensor)
    out = _Allreduce.apply(compressed, op, name, prescale_factor, postscale_factor, process_set)
    return compression.decompress(out, cctx)


# ---- grouped allreduce ----------------------------------------------------------


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts grouped_allreduce() and returns at once (not differentiable).

    Takes grouped_allreduce()'s arguments but compression.

    Returns:
        Handle: one for the group; ``synchronize(handle)`` returns the list
        of reduced tensors (new), in the order of tensors.

    Raises what allreduce_async() raises.
    """
    op = _resolve_op(op, average)
    fn = "grouped_allreduce_async"
    handles = _kolo.grouped_allreduce_async(_tensor_list(tensors, fn), op, _name(name),
                                            _scale(prescale_factor, fn, "prescale_factor"),
                                            _scale(postscale_factor, fn, "postscale_factor"),
                                            _sid(process_set))
    return Handle(handles, _listed)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place grouped allreduce and returns at once.

    Returns:
        Handle: ``synchronize(handle)`` returns the list tensors, each
        holding its reduction.

    Raises what allreduce_async() raises.
    """
    fn = "grouped_allreduce_async_"
    tensors = _tensor_list(tensors, fn)
    op = _resolve_op(op, average)
    handles = _kolo.grouped_allreduce_async(tensors, op, _name(name),
                                            _scale(prescale_factor, fn, "prescale_factor"),
                                            _scale(postscale_factor, fn, "postscale_factor"),
                                            _sid(process_set))
    return Handle(handles, _copy_back(tensors))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped_allreduce(); returns the list of tensors, reduced.

    Not differentiable. Raises what allreduce() raises.
    """
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op, name, prescale, postscale, process_set, *tensors):
        ctx.op, ctx.name, ctx.scales, ctx.process_set = op, name, (prescale, postscale), process_set
        return tuple(synchronize(grouped_allreduce_async(
            tensors, name=name, op=op, prescale_factor=prescale, postscale_factor=postscale,
            process_set=process_set)))

    @staticmethod
    def backward(ctx, *grads):
        if ctx.op not in (Sum, Average):
            raise NotImplementedError(
                "kolo.torch.grouped_allreduce: gradient only for Sum and Average")
        prescale, postscale = ctx.scales
        g = synchronize(grouped_allreduce_async(
            [x.contiguous() for x in grads], name=_grad_name(ctx.name), op=ctx.op,
            prescale_factor=prescale, postscale_factor=postscale, process_set=ctx.process_set))
        return (None, None, None, None, None) + tuple(g)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Allreduces a list of tensors, negotiated and fused as one unit.

    No member runs until every member is ready on every rank of the set.
    The members are named ``<name>.<i>``. Differentiable for Sum and Average.

    Args:
        tensors (list[torch.Tensor]): the tensors (not empty); the other
            arguments are allreduce()'s.

    Returns:
        list[torch.Tensor]: the reductions, new tensors in the order of
        tensors.

    Raises what allreduce() raises.
    """
    op = _resolve_op(op, average)
    tensors = _tensor_list(tensors, "grouped_allreduce")
    _check_compression(compression, "grouped_allreduce")
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduce.apply(op, name, prescale_factor, postscale_factor, process_set,
                                   *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


# ---- allgather --------------------------------------------------------------------


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts allgather() and returns at once (not differentiable).

    Returns:
        Handle: ``synchronize(handle)`` returns the gathered tensor.

    Raises:
        KoloInvalidArgumentError: (a ValueError) as allreduce_async();
            later errors come from synchronize().
    """
    return Handle([_kolo.allgather_async(_tensor(tensor, "allgather_async"), _name(name),
                                         _sid(process_set))], _single)


def _allgather_grad(grads, rows, name, process_set):
    """horovod.torch's allgather gradient: the average over the set of the
    output gradients, this rank's rows of it. rows[i]: rows each rank of
    the set contributed to output i (recorded by the forward)."""
    averaged = synchronize(grouped_allreduce_async(
        [g.contiguous() for g in grads], name=_grad_name(name), op=Average,
        process_set=process_set)) if len(grads) > 1 else [
        allreduce(grads[0].contiguous(), name=_grad_name(name), op=Average,
                  process_set=process_set)]
    me = _set_rank(process_set)
    out = []
    for g, r in zip(averaged, rows):
        offset = sum(r[:me])
        out.append(g.narrow(0, offset, r[me]))
    return out


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        handle = _kolo.allgather_async(_tensor(tensor, "allgather"), _name(name),
                                       _sid(process_set))
        out = handle.wait()
        ctx.name, ctx.process_set = name, process_set
        ctx.rows = [list(handle.received_splits())]
        return out

    @staticmethod
    def backward(ctx, grad):
        g, = _allgather_grad([grad], ctx.rows, ctx.name, ctx.process_set)
        return g, None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along dim 0, in the set's rank order.

    Differentiable (horovod.torch's convention): the gradient is this rank's
    rows of the average of the output gradients over the set.

    Args:
        tensor (torch.Tensor): dtypes and devices as allreduce(); the first
            dimension may differ between ranks, the others must match.
        name (str): as allreduce().
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        torch.Tensor: every rank's rows, rank after rank.

    Raises:
        KoloInvalidArgumentError: (a ValueError) the tensor is rejected
            (undefined, sparse, an unsupported dtype or device), this rank
            is not in process_set, or the name is in flight already.
        KoloMismatchError: (a ValueError) the ranks disagree about the
            operation of this name (dtype, shape, op, root, ...).
        KoloInternalError: a peer failed, timed out or shut down.
    """
    return _Allgather.apply(tensor, name, process_set)


# ---- grouped allgather ------------------------------------------------------------


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts grouped_allgather() and returns at once (not differentiable).

    Returns:
        Handle: one for the group; ``synchronize(handle)`` returns the list
        of gathered tensors.
    """
    handles = _kolo.grouped_allgather_async(_tensor_list(tensors, "grouped_allgather_async"),
                                            _name(name), _sid(process_set))
    return Handle(handles, _listed)


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        handles = _kolo.grouped_allgather_async(list(tensors), _name(name), _sid(process_set))
        outs = [h.wait() for h in handles]
        ctx.name, ctx.process_set = name, process_set
        ctx.rows = [list(h.received_splits()) for h in handles]
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + tuple(_allgather_grad(list(grads), ctx.rows, ctx.name,
                                                    ctx.process_set))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of tensors, negotiated as one unit.

    Differentiable like allgather, element-wise.

    Args:
        tensors (list[torch.Tensor]): as allgather()'s tensor, each; name
            and process_set as allgather().

    Returns:
        list[torch.Tensor]: the gathered tensors, in the order of tensors.

    Raises what allgather() raises.
    """
    return list(_GroupedAllgather.apply(name, process_set,
                                        *_tensor_list(tensors, "grouped_allgather")))


# ---- broadcast ----------------------------------------------------------------------


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcast() and returns at once (not differentiable).

    Returns:
        Handle: ``synchronize(handle)`` returns root_rank's tensor (new).
    """
    fn = "broadcast_async"
    return Handle([_kolo.broadcast_async(_tensor(tensor, fn), _rank_arg(root_rank, fn),
                                         _name(name), False, _sid(process_set))], _single)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts an in-place broadcast and returns at once.

    Returns:
        Handle: ``synchronize(handle)`` returns tensor, overwritten with
        root_rank's values (leave tensor alone until then).
    """
    fn = "broadcast_async_"
    return Handle([_kolo.broadcast_async(_tensor(tensor, fn), _rank_arg(root_rank, fn),
                                         _name(name), True, _sid(process_set))], _single)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast: overwrites tensor with root_rank's; returns tensor.

    Not differentiable. Arguments and errors as broadcast().
    """
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root, ctx.name, ctx.process_set = root_rank, name, process_set
        return synchronize(broadcast_async(tensor, root_rank, name=name,
                                           process_set=process_set))

    @staticmethod
    def backward(ctx, grad):
        g = allreduce(grad.contiguous(), name=_grad_name(ctx.name), op=Average,
                      process_set=ctx.process_set)
        if _kolo.rank() != ctx.root:
            g = torch.zeros_like(g)
        return g, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's tensor on every rank of the set, as a new tensor.

    Differentiable (horovod.torch's convention): root receives the average
    of the set's output gradients, the other ranks zeros.

    Args:
        tensor (torch.Tensor): the same shape and dtype on every rank; only
            root_rank's values matter.
        root_rank (int): the sending rank, a rank of the job (hvd.rank()),
            member of process_set.
        name (str): as allreduce().
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        torch.Tensor: root_rank's values.

    Raises:
        KoloInvalidArgumentError: (a ValueError) the tensor is rejected
            (undefined, sparse, an unsupported dtype or device), this rank
            is not in process_set, or the name is in flight already.
        KoloMismatchError: (a ValueError) the ranks disagree about the
            operation of this name (dtype, shape, op, root, ...).
        KoloInternalError: a peer failed, timed out or shut down.
    """
    return _Broadcast.apply(_tensor(tensor, "broadcast"), _rank_arg(root_rank, "broadcast"),
                            name, process_set)


# ---- alltoall -------------------------------------------------------------------------


def _splits_list(splits, fn="alltoall"):
    """splits as a list of ints: a 1-d integer tensor (Horovod's int32, or
    another integer type) or a sequence of ints, each >= 0. Anything else
    (float splits, for one) is a ValueError, as in Horovod."""
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        if splits.is_floating_point() or splits.is_complex() or splits.dtype == torch.bool:
            raise ValueError("kolo.torch.%s: splits must hold integers (torch.int32 as in "
                             "Horovod, or another integer type), got a %s tensor"
                             % (fn, str(splits.dtype).replace("torch.", "")))
        if splits.dim() > 1:
            raise ValueError("kolo.torch.%s: splits must be a 1-d tensor, got shape %s"
                             % (fn, tuple(splits.shape)))
        values = splits.tolist() if splits.dim() == 1 else [splits.item()]
    elif isinstance(splits, (str, bytes, dict)) or not hasattr(splits, "__iter__"):
        raise ValueError("kolo.torch.%s: splits must be a 1-d integer tensor or a list of ints, "
                         "got %s" % (fn, _kind(splits)))
    else:
        values = list(splits)
    out = []
    for i, s in enumerate(values):
        n = _as_int(s)
        if n is None:
            raise ValueError("kolo.torch.%s: splits[%d] must be an int, got %s"
                             % (fn, i, _kind(s)))
        if not 0 <= n <= _INT64_MAX:
            raise ValueError("kolo.torch.%s: splits[%d]=%d: a split is a number of rows, >= 0"
                             % (fn, i, n))
        out.append(n)
    return out


def _alltoall_finish(outputs, handles):
    splits = torch.tensor(handles[0].received_splits(), dtype=torch.int32)
    return outputs[0], splits


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts alltoall() and returns at once (not differentiable).

    Returns:
        Handle: ``synchronize(handle)`` returns (tensor, received_splits),
        received_splits an int32 tensor, whether or not splits was given.
    """
    fn = "alltoall_async"
    return Handle([_kolo.alltoall_async(_tensor(tensor, fn), _splits_list(splits, fn),
                                        _name(name), _sid(process_set))], _alltoall_finish)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = synchronize(alltoall_async(tensor, splits, name=name,
                                                   process_set=process_set))
        ctx.name, ctx.received, ctx.process_set = name, received, process_set
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _grad_splits):
        g, _ = synchronize(alltoall_async(grad.contiguous(), ctx.received,
                                          name=_grad_name(ctx.name),
                                          process_set=ctx.process_set))
        return g, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[j] rows (dim 0) to the set's rank j, receives from each.

    Differentiable: the gradient is an alltoall back with the received
    splits.

    Args:
        tensor (torch.Tensor): the rows to send; dtypes as allreduce().
        splits (list[int] or torch.Tensor): rows for each rank of the set
            (len = the set's size, sum = tensor.shape[0]); None splits
            evenly (tensor.shape[0] must divide by the set's size).
        name (str): as allreduce().
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        The rows received, in the set's rank order; with splits given,
        (tensor, received_splits) like horovod.torch, received_splits an
        int32 tensor of the rows from each rank.

    Raises:
        KoloInvalidArgumentError: (a ValueError) the tensor is rejected
            (undefined, sparse, an unsupported dtype or device), this rank
            is not in process_set, or the name is in flight already.
        KoloMismatchError: (a ValueError) the ranks disagree about the
            operation of this name (dtype, shape, op, root, ...).
        KoloInternalError: a peer failed, timed out or shut down.
    """
    _tensor(tensor, "alltoall")
    _splits_list(splits)  # checked before the autograd function sees it
    out, received = _Alltoall.apply(tensor, splits, name, process_set)
    return out if splits is None else (out, received)


# ---- reducescatter ----------------------------------------------------------------------


def reducescatter_async(tensor, name=None, op=Average, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=global_process_set):
    """Starts reducescatter() and returns at once (not differentiable).

    Returns:
        Handle: ``synchronize(handle)`` returns this rank's rows of the
        reduction.
    """
    fn = "reducescatter_async"
    return Handle([_kolo.reducescatter_async(_tensor(tensor, fn), _check_op(op), _name(name),
                                             _scale(prescale_factor, fn, "prescale_factor"),
                                             _scale(postscale_factor, fn, "postscale_factor"),
                                             _sid(process_set))], _single)


def _reducescatter_grad(grads, op, scales, name, process_set):
    """horovod.torch's reducescatter gradient: an allgather of the output
    gradients, times the set size for Sum, times the scale factors."""
    if op not in (Sum, Average):
        raise NotImplementedError("kolo.torch.reducescatter: gradient only for Sum and Average")
    factor = scales[0] * scales[1] * (_set_size(process_set) if op == Sum else 1)
    scaled = [g.contiguous() * factor if factor != 1.0 else g.contiguous() for g in grads]
    if len(scaled) == 1:
        return [synchronize(allgather_async(scaled[0], name=_grad_name(name),
                                            process_set=process_set))]
    return synchronize(grouped_allgather_async(scaled, name=_grad_name(name),
                                               process_set=process_set))


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.op, ctx.name, ctx.scales, ctx.process_set = op, name, (prescale, postscale), process_set
        return synchronize(reducescatter_async(tensor, name=name, op=op,
                                               prescale_factor=prescale,
                                               postscale_factor=postscale,
                                               process_set=process_set))

    @staticmethod
    def backward(ctx, grad):
        g, = _reducescatter_grad([grad], ctx.op, ctx.scales, ctx.name, ctx.process_set)
        return g, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces over the set's ranks and returns this rank's rows of dim 0.

    The rows are split as evenly as possible, the first ranks taking the
    rest. Differentiable for Sum and Average.

    Args:
        tensor (torch.Tensor): the same shape and dtype on every rank.
        name (str): as allreduce(); so are compression, prescale_factor,
            postscale_factor and process_set.
        op (ReduceOp): Average (default), Sum, Min, Max or Product.

    Returns:
        torch.Tensor: this rank's share of the reduction.

    Raises:
        ValueError: op is not a ReduceOp.
        KoloInvalidArgumentError: (a ValueError) the tensor is rejected
            (undefined, sparse, an unsupported dtype or device), this rank
            is not in process_set, or the name is in flight already.
        KoloMismatchError: (a ValueError) the ranks disagree about the
            operation of this name (dtype, shape, op, root, ...).
        KoloInternalError: a peer failed, timed out or shut down.
    """
    _tensor(tensor, "reducescatter")
    compressed, cctx = _check_compression(compression, "reducescatter").compress(tensor)
    out = _Reducescatter.apply(compressed, name, _check_op(op), prescale_factor,
                               postscale_factor, process_set)
    return compression.decompress(out, cctx)


# ---- grouped reducescatter ----------------------------------------------------------------


def grouped_reducescatter_async(tensors, name=None, op=Average, prescale_factor=1.0,
                                postscale_factor=1.0, process_set=global_process_set):
    """Starts grouped_reducescatter() and returns at once.

    Returns:
        Handle: one for the group; ``synchronize(handle)`` returns the list
        of this rank's shares.
    """
    fn = "grouped_reducescatter_async"
    handles = _kolo.grouped_reducescatter_async(_tensor_list(tensors, fn), _check_op(op),
                                                _name(name),
                                                _scale(prescale_factor, fn, "prescale_factor"),
                                                _scale(postscale_factor, fn, "postscale_factor"),
                                                _sid(process_set))
    return Handle(handles, _listed)


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.op, ctx.name, ctx.scales, ctx.process_set = op, name, (prescale, postscale), process_set
        return tuple(synchronize(grouped_reducescatter_async(
            tensors, name=name, op=op, prescale_factor=prescale, postscale_factor=postscale,
            process_set=process_set)))

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, None, None, None) + tuple(
            _reducescatter_grad(list(grads), ctx.op, ctx.scales, ctx.name, ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          prescale_factor=1.0, postscale_factor=1.0,
                          process_set=global_process_set):
    """Reducescatters a list of tensors, negotiated as one unit.

    Differentiable like reducescatter, element-wise.

    Args:
        tensors (list[torch.Tensor]): as reducescatter()'s tensor, each;
            the other arguments are reducescatter()'s.

    Returns:
        list[torch.Tensor]: this rank's shares, in the order of tensors.
    """
    tensors = _tensor_list(tensors, "grouped_reducescatter")
    _check_compression(compression, "grouped_reducescatter")
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedReducescatter.apply(name, _check_op(op), prescale_factor, postscale_factor,
                                       process_set, *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


# ---- control --------------------------------------------------------------------------------


def join(device=-1, process_set=global_process_set):
    """This rank has no more data: until every rank (of process_set) joined,
    it takes part in the set's operations with a neutral contribution:
    zeros for allreduce and reducescatter sums (the identity of Min, Max,
    Product), no rows for allgather and alltoall, and it receives
    broadcasts (it cannot be a root).

    Args:
        device: accepted for Horovod compatibility and ignored (kolo needs
            no device for join).
        process_set (ProcessSet): the ranks that join (default: all).

    Returns:
        int: the last rank (of the job) to join.

    Raises:
        KoloInternalError: a peer failed, timed out or shut down.
    """
    del device
    return _kolo.join(_sid(process_set))


def barrier(process_set=global_process_set):
    """Returns once every rank of process_set reached the barrier.

    Raises:
        KoloInvalidArgumentError: this rank is not in process_set.
        KoloInternalError: a peer failed, timed out or shut down.
    """
    _kolo.barrier(_sid(process_set))
