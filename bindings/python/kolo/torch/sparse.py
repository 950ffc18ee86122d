"""Sparse allreduce: an allgather of every rank's indices and values.

A sparse COO tensor (an ``nn.Embedding(sparse=True)`` gradient) is reduced
the way Horovod does it: every rank's nonzero entries are gathered, so the
result holds all of them, uncoalesced (duplicate indices add up when the
tensor is coalesced or applied), divided by the number of ranks for Average.
"""
import torch

from kolo import _kolo, _kolo_torch
from kolo.torch.exchange_ops import allgather_async
from kolo.torch.ops import Average, Sum
from kolo.torch.process_sets import _id, global_process_set


class SparseHandle:
    """A sparse allreduce in flight. ``poll()``, ``wait()``, and callable like
    Horovod's handle: ``handle()`` returns the reduced sparse tensor;
    ``kolo.torch.synchronize(handle)`` does the same."""

    __slots__ = ("_tensor", "_indices", "_values", "_divisor", "_result")

    def __init__(self, tensor, indices, values, divisor):
        self._tensor = tensor
        self._indices = indices
        self._values = values
        self._divisor = divisor
        self._result = None

    def poll(self):
        """True once both allgathers finished; never blocks."""
        return self._indices.poll() and self._values.poll()

    def wait(self):
        """Blocks until done and returns the reduced sparse COO tensor
        (uncoalesced); raises the allgathers' error (KoloError). Waiting
        again returns the same tensor."""
        if self._result is None:
            values = self._values.wait()
            indices = self._indices.wait()
            if self._divisor != 1:
                values = values / self._divisor
            t = self._tensor
            self._result = torch.sparse_coo_tensor(indices.transpose(0, 1), values, t.size(),
                                                   dtype=values.dtype, device=t.device)
        return self._result

    __call__ = wait


def sparse_allreduce_async(tensor, name=None, op=None, process_set=global_process_set):
    """Starts the reduction of a sparse COO tensor over all ranks (op Average,
    the default, or Sum) through two allgathers named ``<name>.indices`` and
    ``<name>.values`` among the ranks of process_set; returns a SparseHandle.
    The number of nonzero entries may differ between ranks.

    Args:
        tensor (torch.Tensor): a sparse COO tensor of the same size on every
            rank.
        name (str): base name of the two allgathers; None takes the next
            generated one (then calls must come in the same order on every
            rank).
        op (ReduceOp): Average (default) or Sum.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        SparseHandle: ``handle.wait()`` (or ``handle()``, or
        ``synchronize(handle)``) gives the result.

    Raises:
        ValueError: op is not Average or Sum, or tensor is not sparse.
        KoloInvalidArgumentError: as allgather_async().
    """
    if op is None:
        op = Average
    if op not in (Average, Sum):
        raise ValueError("sparse_allreduce_async: op must be Average or Sum, got %s" % (op,))
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async needs a sparse COO tensor (tensor.is_sparse); "
                         "use allreduce_async for dense tensors")
    base = (_kolo_torch.next_name("sparse_allreduce", _id(process_set)) if name is None
            else str(name))
    # allgather concatenates along dim 0: indices travel as (nnz, sparse_dims).
    indices = allgather_async(tensor._indices().transpose(0, 1).contiguous(),
                                  name=base + ".indices", process_set=process_set)
    values = allgather_async(tensor._values().contiguous(), name=base + ".values",
                                 process_set=process_set)
    divisor = len(_kolo.process_set_ranks(_id(process_set))) if op == Average else 1
    return SparseHandle(tensor, indices, values, divisor)
