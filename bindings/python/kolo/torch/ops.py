"""Tensor collectives with horovod.torch's signatures.

Every operation goes to the C++ engine through the LibTorch adapter
(``kolo._kolo``); this module only adapts arguments, wraps handles and adds
autograd. Ranks match operations by name: an unnamed operation gets the
adapter's next generated name (``noname.<op>.<n>``), so unnamed operations
must be issued in the same order on every rank.

The blocking, out-of-place operations (allreduce, grouped_allreduce,
allgather, broadcast, alltoall, reducescatter) are differentiable; the
in-place and asynchronous ones are not.
"""
import warnings

import torch

from kolo import _kolo
from kolo.torch.compression import Compression

ReduceOp = _kolo.ReduceOp
Average = ReduceOp.Average
Sum = ReduceOp.Sum
Min = ReduceOp.Min
Max = ReduceOp.Max
Product = ReduceOp.Product
Adasum = ReduceOp.Adasum  # allreduce of floating tensors only (see README "Adasum")


def _name(name):
    return "" if name is None else str(name)


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
    if not isinstance(op, ReduceOp):
        raise ValueError("op must be one of kolo.torch.Average, Sum, Min, Max, Product, "
                         "Adasum; got %r" % (op,))
    return op


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
        return all(h.poll() for h in self._handles)

    def wait(self):
        if not self._done:
            outputs = [h.wait() for h in self._handles]
            self._result = self._finish(outputs, self._handles)
            self._done = True
        return self._result


def _single(outputs, _handles):
    return outputs[0]


def poll(handle):
    """True when the operation behind handle has finished."""
    return handle.poll()


def synchronize(handle):
    """Waits for handle and returns its result (raises the operation's error)."""
    return handle.wait()


# ---- allreduce ----------------------------------------------------------------


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0):
    op = _resolve_op(op, average)
    return Handle([_kolo.allreduce_async(tensor, op, _name(name), prescale_factor,
                                         postscale_factor, False)], _single)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0):
    op = _resolve_op(op, average)
    return Handle([_kolo.allreduce_async(tensor, op, _name(name), prescale_factor,
                                         postscale_factor, True)], _single)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0):
    """In-place allreduce; returns tensor. Not differentiable."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor))


def _grad_name(name):
    return None if name is None else "%s.grad" % name


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, name, prescale, postscale):
        ctx.op, ctx.name, ctx.scales = op, name, (prescale, postscale)
        result = synchronize(allreduce_async(tensor, name=name, op=op,
                                             prescale_factor=prescale,
                                             postscale_factor=postscale))
        if op in (Min, Max):
            ctx.save_for_backward(tensor, result)
        return result

    @staticmethod
    def backward(ctx, grad):
        prescale, postscale = ctx.scales
        if ctx.op in (Sum, Average, Adasum):
            # d(post * reduce(pre * x)) / dx_r: the same reduction of the grads
            # (Adasum: Horovod's convention, the Adasum of the grads).
            g = allreduce(grad, name=_grad_name(ctx.name), op=ctx.op,
                          prescale_factor=prescale, postscale_factor=postscale)
        elif ctx.op in (Min, Max) and prescale == 1.0 and postscale == 1.0:
            # Subgradient: the ranks holding the extremum share the gradient.
            tensor, result = ctx.saved_tensors
            mask = (tensor == result).to(grad.dtype)
            total = allreduce(grad, name=_grad_name(ctx.name), op=Sum)
            ties = allreduce(mask, name=None if ctx.name is None else ctx.name + ".ties",
                             op=Sum)
            g = total * mask / ties.clamp(min=1)
        else:
            raise NotImplementedError(
                "kolo.torch.allreduce: no gradient for op=%s with these scale factors" % ctx.op)
        return g, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0):
    """Reduces tensor over all ranks (default: Average); returns a new tensor.

    Differentiable: the gradient is the same reduction of the gradients
    (Min/Max: shared among the ranks that hold the extremum).
    """
    op = _resolve_op(op, average)
    compressed, cctx = compression.compress(tensor)
    out = _Allreduce.apply(compressed, op, name, prescale_factor, postscale_factor)
    return compression.decompress(out, cctx)


# ---- grouped allreduce ----------------------------------------------------------


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0):
    """One handle for the group; synchronize() returns the list of results."""
    op = _resolve_op(op, average)
    handles = _kolo.grouped_allreduce_async(list(tensors), op, _name(name), prescale_factor,
                                            postscale_factor)
    return Handle(handles, lambda outputs, _h: list(outputs))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0):
    tensors = list(tensors)
    op = _resolve_op(op, average)
    handles = _kolo.grouped_allreduce_async(tensors, op, _name(name), prescale_factor,
                                            postscale_factor)

    def finish(outputs, _h):
        with torch.no_grad():
            for target, out in zip(tensors, outputs):
                target.copy_(out)
        return tensors

    return Handle(handles, finish)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor))


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op, name, prescale, postscale, *tensors):
        ctx.op, ctx.name, ctx.scales = op, name, (prescale, postscale)
        return tuple(synchronize(grouped_allreduce_async(
            tensors, name=name, op=op, prescale_factor=prescale, postscale_factor=postscale)))

    @staticmethod
    def backward(ctx, *grads):
        if ctx.op not in (Sum, Average):
            raise NotImplementedError(
                "kolo.torch.grouped_allreduce: gradient only for Sum and Average")
        prescale, postscale = ctx.scales
        g = synchronize(grouped_allreduce_async(
            [x.contiguous() for x in grads], name=_grad_name(ctx.name), op=ctx.op,
            prescale_factor=prescale, postscale_factor=postscale))
        return (None, None, None, None) + tuple(g)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0):
    """Allreduces a list of tensors, negotiated and fused as one unit."""
    op = _resolve_op(op, average)
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduce.apply(op, name, prescale_factor, postscale_factor,
                                   *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


# ---- allgather --------------------------------------------------------------------


def allgather_async(tensor, name=None):
    return Handle([_kolo.allgather_async(tensor, _name(name))], _single)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name):
        ctx.name, ctx.rows = name, tensor.shape[0] if tensor.dim() > 0 else 1
        return synchronize(allgather_async(tensor, name=name))

    @staticmethod
    def backward(ctx, grad):
        total = allreduce(grad, name=_grad_name(ctx.name), op=Sum)
        rows = synchronize(allgather_async(
            torch.tensor([ctx.rows], dtype=torch.int64),
            name=None if ctx.name is None else ctx.name + ".rows"))
        offset = int(rows[:_kolo.rank()].sum())
        return total.narrow(0, offset, ctx.rows), None


def allgather(tensor, name=None):
    """Concatenates every rank's tensor along dim 0 (first dim may differ).

    Differentiable: the gradient is this rank's rows of the summed gradient.
    """
    return _Allgather.apply(tensor, name)


# ---- broadcast ----------------------------------------------------------------------


def broadcast_async(tensor, root_rank, name=None):
    return Handle([_kolo.broadcast_async(tensor, root_rank, _name(name), False)], _single)


def broadcast_async_(tensor, root_rank, name=None):
    return Handle([_kolo.broadcast_async(tensor, root_rank, _name(name), True)], _single)


def broadcast_(tensor, root_rank, name=None):
    """In-place broadcast; returns tensor. Not differentiable."""
    return synchronize(broadcast_async_(tensor, root_rank, name))


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root, ctx.name = root_rank, name
        return synchronize(broadcast_async(tensor, root_rank, name=name))

    @staticmethod
    def backward(ctx, grad):
        g = allreduce(grad, name=_grad_name(ctx.name), op=Sum)
        if _kolo.rank() != ctx.root:
            g = torch.zeros_like(g)
        return g, None, None


def broadcast(tensor, root_rank, name=None):
    """root_rank's tensor on every rank, as a new tensor.

    Differentiable: root receives the sum of all ranks' gradients, the
    other ranks zeros.
    """
    return _Broadcast.apply(tensor, root_rank, name)


# ---- alltoall -------------------------------------------------------------------------


def _splits_list(splits):
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        return [int(s) for s in splits.flatten().tolist()]
    return [int(s) for s in splits]


def _alltoall_finish(outputs, handles):
    splits = torch.tensor(handles[0].received_splits(), dtype=torch.int32)
    return outputs[0], splits


def alltoall_async(tensor, splits=None, name=None):
    """synchronize() returns (tensor, received_splits)."""
    return Handle([_kolo.alltoall_async(tensor, _splits_list(splits), _name(name))],
                  _alltoall_finish)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name):
        out, received = synchronize(alltoall_async(tensor, splits, name=name))
        ctx.name, ctx.received = name, received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _grad_splits):
        g, _ = synchronize(alltoall_async(grad.contiguous(), ctx.received,
                                          name=_grad_name(ctx.name)))
        return g, None, None


def alltoall(tensor, splits=None, name=None):
    """Sends splits[j] rows (dim 0) to rank j (None: an even split).

    Returns the rows received, in rank order; with splits given, returns
    (tensor, received_splits) like horovod.torch. Differentiable.
    """
    out, received = _Alltoall.apply(tensor, splits, name)
    return out if splits is None else (out, received)


# ---- reducescatter ----------------------------------------------------------------------


def reducescatter_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                        postscale_factor=1.0):
    op = _resolve_op(op, average)
    return Handle([_kolo.reducescatter_async(tensor, op, _name(name), prescale_factor,
                                             postscale_factor)], _single)


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, name, prescale, postscale):
        ctx.op, ctx.name = op, name
        ctx.scale = prescale * postscale / (_kolo.size() if op == Average else 1)
        return synchronize(reducescatter_async(tensor, name=name, op=op,
                                               prescale_factor=prescale,
                                               postscale_factor=postscale))

    @staticmethod
    def backward(ctx, grad):
        if ctx.op not in (Sum, Average):
            raise NotImplementedError(
                "kolo.torch.reducescatter: gradient only for Sum and Average")
        g = synchronize(allgather_async(grad.contiguous(), name=_grad_name(ctx.name)))
        return g * ctx.scale, None, None, None, None


def reducescatter(tensor, average=None, name=None, compression=Compression.none, op=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces over ranks (default Average) and returns this rank's rows of
    dim 0 (split as evenly as possible, the first ranks taking the rest).
    Differentiable (Sum and Average)."""
    op = _resolve_op(op, average)
    compressed, cctx = compression.compress(tensor)
    out = _Reducescatter.apply(compressed, op, name, prescale_factor, postscale_factor)
    return compression.decompress(out, cctx)


# ---- control --------------------------------------------------------------------------------


def join(device=-1):
    """This rank has no more data: until every rank joined, it takes part in
    allreduce (with zeros), allgather (no rows) and broadcast. Returns the
    last rank to join. device is accepted for Horovod compatibility."""
    del device
    return _kolo.join()


def barrier():
    """Returns once every rank reached the barrier."""
    _kolo.barrier()
