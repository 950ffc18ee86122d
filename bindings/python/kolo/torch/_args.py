"""Argument checks shared by kolo.torch's operations.

Each check names the function and the argument that was wrong, and raises
ValueError (as Horovod does), never a binding's TypeError.
"""
import torch

from kolo import _kolo
from kolo.common import _args as _common
# The framework-free checks, as kolo.allreduce and friends make them.
from kolo.common._args import _INT32_MAX, _as_int, _kind, _name, _sid  # noqa: F401
from kolo.common.process_sets import _id

_INT64_MAX = 2 ** 63 - 1


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
    return _common._scale(value, "kolo.torch." + fn, what)


def _rank_arg(value, fn, what="root_rank"):
    """A rank of the job as an int (ints, numpy ints, 0-d integer tensors)."""
    return _common._rank_arg(value, "kolo.torch." + fn, what)


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


def _check_compression(compression, fn):
    if not (hasattr(compression, "compress") and hasattr(compression, "decompress")):
        raise ValueError("kolo.torch.%s: compression must be a kolo.torch.Compression member "
                         "(Compression.none, fp16, bf16), got %s" % (fn, _kind(compression)))
    return compression


def _resolve_op(op, average):
    """op wins; the legacy average= flag maps to Average/Sum (the framework-free check)."""
    return _common._resolve_op(op, average, None, "kolo.torch")


def _check_op(op):
    return _common._check_op(op, None, "kolo.torch")


def _set_size(process_set):
    return len(_kolo.process_set_ranks(_id(process_set)))


def _set_rank(process_set):
    return _kolo.process_set_ranks(_id(process_set)).index(_kolo.rank())



def _grad_name(name, suffix="grad"):
    return None if name is None else "%s.%s" % (name, suffix)
