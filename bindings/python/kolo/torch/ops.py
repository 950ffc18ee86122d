"""Tensor collectives with horovod.torch's signatures: the reductions
(allreduce, reducescatter, grouped and not) and ReduceOp. The operations
that move rows are in kolo.torch.exchange_ops, handles, join and barrier in
kolo.torch.sync, the argument checks of all of them in kolo.torch._args;
kolo.torch exports them all.

Every operation goes to the C++ engine through the LibTorch adapter
(``kolo._kolo``); these modules only adapt arguments, wrap handles and add
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
import torch

from kolo import _kolo, _kolo_torch
from kolo.torch._args import (_check_compression, _check_op, _grad_name, _name, _resolve_op,
                              _scale, _set_size, _sid, _tensor, _tensor_list)
from kolo.torch.compression import Compression
from kolo.torch.process_sets import global_process_set
from kolo.torch.sync import Handle, _copy_back, _listed, _single, synchronize

# The reduce ops are the framework-free API's (documented there).
from kolo.common.arrays import Adasum, Average, Max, Min, Product, ReduceOp, Sum  # noqa: E402,F401


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
    return Handle([_kolo_torch.allreduce_async(_tensor(tensor, fn), op, _name(name),
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
    return Handle([_kolo_torch.allreduce_async(_tensor(tensor, fn), op, _name(name),
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
    handles = _kolo_torch.grouped_allreduce_async(_tensor_list(tensors, fn), op, _name(name),
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
    handles = _kolo_torch.grouped_allreduce_async(tensors, op, _name(name),
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


# ---- reducescatter ----------------------------------------------------------------------


def reducescatter_async(tensor, name=None, op=Average, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=global_process_set):
    """Starts reducescatter() and returns at once (not differentiable).

    Returns:
        Handle: ``synchronize(handle)`` returns this rank's rows of the
        reduction.
    """
    fn = "reducescatter_async"
    return Handle([_kolo_torch.reducescatter_async(_tensor(tensor, fn), _check_op(op), _name(name),
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
    # kolo.torch.exchange_ops' allgather_async, which builds on this module
    if len(scaled) == 1:
        return [_kolo_torch.allgather_async(scaled[0], _name(_grad_name(name)),
                                            _sid(process_set)).wait()]
    return [h.wait() for h in _kolo_torch.grouped_allgather_async(scaled, _name(_grad_name(name)),
                                                                  _sid(process_set))]


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
    handles = _kolo_torch.grouped_reducescatter_async(
        _tensor_list(tensors, fn), _check_op(op), _name(name),
        _scale(prescale_factor, fn, "prescale_factor"),
        _scale(postscale_factor, fn, "postscale_factor"), _sid(process_set))
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

