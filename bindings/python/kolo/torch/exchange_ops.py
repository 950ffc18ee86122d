"""The collectives that move rows rather than reduce them: allgather,
broadcast and alltoall, each blocking (differentiable), asynchronous and,
where Horovod has one, grouped or in place. Arguments and naming as in
kolo.torch.ops."""
import torch

from kolo import _kolo, _kolo_torch
from kolo.torch._args import (_as_int, _grad_name, _INT64_MAX, _kind, _name, _rank_arg,
                              _set_rank, _sid, _tensor, _tensor_list)
from kolo.torch.ops import Average, allreduce, grouped_allreduce_async
from kolo.torch.process_sets import global_process_set
from kolo.torch.sync import Handle, _listed, _single, synchronize


# ---- allgather --------------------------------------------------------------------


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts allgather() and returns at once (not differentiable).

    Returns:
        Handle: ``synchronize(handle)`` returns the gathered tensor.

    Raises:
        KoloInvalidArgumentError: (a ValueError) as allreduce_async();
            later errors come from synchronize().
    """
    return Handle([_kolo_torch.allgather_async(_tensor(tensor, "allgather_async"), _name(name),
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
        handle = _kolo_torch.allgather_async(_tensor(tensor, "allgather"), _name(name),
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
    handles = _kolo_torch.grouped_allgather_async(_tensor_list(tensors, "grouped_allgather_async"),
                                                  _name(name), _sid(process_set))
    return Handle(handles, _listed)


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        handles = _kolo_torch.grouped_allgather_async(list(tensors), _name(name), _sid(process_set))
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
    return Handle([_kolo_torch.broadcast_async(_tensor(tensor, fn), _rank_arg(root_rank, fn),
                                               _name(name), False, _sid(process_set))], _single)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts an in-place broadcast and returns at once.

    Returns:
        Handle: ``synchronize(handle)`` returns tensor, overwritten with
        root_rank's values (leave tensor alone until then).
    """
    fn = "broadcast_async_"
    return Handle([_kolo_torch.broadcast_async(_tensor(tensor, fn), _rank_arg(root_rank, fn),
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
    return Handle([_kolo_torch.alltoall_async(_tensor(tensor, fn), _splits_list(splits, fn),
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

