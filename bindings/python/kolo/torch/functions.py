"""Model and optimizer state, and Python objects, across ranks."""
import io
import pickle

import torch

from kolo import _kolo, _kolo_torch
from kolo.torch._args import _rank_arg, _sid
from kolo.torch.exchange_ops import allgather_async, broadcast_async_
from kolo.torch.process_sets import global_process_set
from kolo.torch.sync import synchronize

try:  # Horovod pickles objects with cloudpickle (lambdas, local classes)
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - depends on the environment
    _pickler = pickle


def _dumps(obj):
    buf = io.BytesIO()
    _pickler.dump(obj, buf, protocol=pickle.HIGHEST_PROTOCOL)
    return buf.getvalue()


def _named_tensors(params):
    if isinstance(params, dict):
        return sorted(params.items())
    if isinstance(params, (str, bytes)) or not hasattr(params, "__iter__"):
        raise ValueError("invalid params of type: %s" % type(params))
    out = []
    for i, item in enumerate(params):
        if isinstance(item, tuple):
            if len(item) != 2:
                raise ValueError("broadcast_parameters: params[%d] is a tuple of %d items, "
                                 "not a (name, tensor) pair" % (i, len(item)))
            out.append((str(item[0]), item[1]))
        else:
            out.append(("param.%d" % i, item))
    return out


def broadcast_parameters(params, root_rank, prefix=None, process_set=global_process_set):
    """Overwrites every tensor of params with root_rank's, in place.

    Collective: every rank of process_set calls it with the same names.
    Each tensor is broadcast as ``broadcast_parameters.<name>``, all of
    them in flight at once; the call returns when all have arrived.

    Args:
        params: a state_dict (parameters and buffers), named_parameters(),
            a list of (name, tensor) pairs or a list of tensors (named
            ``param.<i>``).
        root_rank (int): the rank (of the job) whose values everyone gets.
        prefix (str): prepended to every name (the names of the
            broadcasts; the same on every rank).
        process_set (ProcessSet): the ranks that take part (default: all).

    Raises:
        ValueError: params is not one of the above, or holds a non-tensor;
            KoloInvalidArgumentError (a ValueError) for duplicate names.
        KoloMismatchError: (a ValueError) the ranks passed different names,
            shapes or dtypes.
        KoloInternalError: a peer failed, timed out or shut down.
    """
    root_rank = _rank_arg(root_rank, "broadcast_parameters")
    named = _named_tensors(params)
    if prefix is not None and not isinstance(prefix, str):
        raise ValueError("kolo.torch.broadcast_parameters: prefix must be a str, got %s"
                         % type(prefix).__name__)
    if prefix:
        named = [(prefix + n, t) for n, t in named]
    tensors = []
    for n, t in named:
        if not isinstance(t, torch.Tensor):
            raise ValueError("broadcast_parameters: '%s' is a %s, not a tensor" % (n, type(t)))
        tensors.append((n, t.data))
    with torch.no_grad():
        _kolo_torch.broadcast_parameters(tensors, root_rank, _sid(process_set))


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's obj on every rank of process_set.

    obj is pickled with cloudpickle when it is installed (lambdas, local
    classes), else pickle. Other ranks' obj is ignored, and root gets its
    own obj back (as in Horovod).

    Args:
        obj: the object (used on root_rank only).
        root_rank (int): the sending rank (of the job).
        name (str): the operation's name; None takes the next generated
            one, so unnamed calls must come in the same order on every rank.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        root_rank's object (on root itself, obj unchanged).

    Raises:
        KoloInternalError: a peer failed, timed out or shut down.
    """
    root_rank = _rank_arg(root_rank, "broadcast_object")
    is_root = _kolo.rank() == root_rank
    received = _kolo_torch.broadcast_object_bytes(
        _dumps(obj) if is_root else b"", root_rank, "" if name is None else str(name),
        _sid(process_set))
    return obj if is_root else pickle.load(io.BytesIO(received))


def allgather_object(obj, name=None, process_set=global_process_set):
    """The list of every rank's obj, in the set's rank order.

    Objects are pickled (cloudpickle when installed) and may differ in size
    between ranks; two allgathers named ``<name>.sizes`` and
    ``<name>.data``.

    Args:
        obj: this rank's object.
        name (str): base name; None takes the next generated one (then calls
            must come in the same order on every rank).
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        list: one object per rank of the set.

    Raises:
        KoloInternalError: a peer failed, timed out or shut down.
    """
    payload = torch.frombuffer(bytearray(_dumps(obj)), dtype=torch.uint8)
    base = str(name) if name is not None else _kolo_torch.next_name("allgather_object",
                                                                       _sid(process_set))
    sizes = synchronize(allgather_async(
        torch.tensor([payload.numel()], dtype=torch.int64), name=base + ".sizes",
        process_set=process_set))
    data = synchronize(allgather_async(payload, name=base + ".data",
                                               process_set=process_set))
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(pickle.load(io.BytesIO(data[offset:offset + n].numpy().tobytes())))
        offset += n
    return out


class _TensorSlot:
    """Placeholder for a state tensor in the pickled optimizer layout."""

    __slots__ = ("index", "shape", "dtype")

    def __init__(self, index, shape, dtype):
        self.index, self.shape, self.dtype = index, shape, dtype

    def __getstate__(self):
        return (self.index, self.shape, self.dtype)

    def __setstate__(self, state):
        self.index, self.shape, self.dtype = state


def _strip_tensors(obj, tensors):
    """obj with every tensor replaced by a _TensorSlot; tensors collects them."""
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return _TensorSlot(len(tensors) - 1, tuple(obj.shape), obj.dtype)
    if isinstance(obj, dict):
        return {k: _strip_tensors(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_strip_tensors(v, tensors) for v in obj)
    return obj


def _slots(obj, out):
    if isinstance(obj, _TensorSlot):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _slots(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _slots(v, out)
    return out


def _fill_tensors(obj, tensors):
    if isinstance(obj, _TensorSlot):
        return tensors[obj.index]
    if isinstance(obj, dict):
        return {k: _fill_tensors(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_fill_tensors(v, tensors) for v in obj)
    return obj


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Makes optimizer's state and param-group options (lr, betas, ...) equal
    to root_rank's, also on ranks whose optimizer never stepped.

    The layout (keys, scalars, shapes) travels as one pickled object and each
    state tensor as its own broadcast; non-root ranks then load_state_dict().
    Every rank's optimizer must be the same type over the same parameter
    layout. Unlike Horovod, no dummy step is taken, so parameters are never
    touched; as after Horovod's, a rank whose state was empty has a zero
    gradient on every parameter that requires one and had none (sparse for
    SparseAdam).

    Args:
        optimizer (torch.optim.Optimizer): the optimizer (a
            DistributedOptimizer works too).
        root_rank (int): the rank (of the job) whose state everyone gets.
        model: accepted for Horovod compatibility and ignored.
        process_set (ProcessSet): the ranks that take part (default: all).

    Raises:
        ValueError: optimizer is torch.optim.LBFGS (or, from
            load_state_dict, its layout differs from root_rank's).
        KoloInternalError: a peer failed, timed out or shut down.
    """
    del model
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError("kolo.torch.broadcast_optimizer_state: optimizer must be a "
                         "torch.optim.Optimizer (or a DistributedOptimizer), got %s"
                         % type(optimizer).__name__)
    root_rank = _rank_arg(root_rank, "broadcast_optimizer_state")
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state:
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.requires_grad and p.grad is None:
                        p.grad = torch.zeros_like(p, memory_format=torch.preserve_format)
                        if isinstance(optimizer, torch.optim.SparseAdam):
                            p.grad = p.grad.to_sparse()
    is_root = _kolo.rank() == root_rank
    base = _kolo_torch.next_name("broadcast", _sid(process_set))
    local = []
    layout = _strip_tensors(optimizer.state_dict(), local) if is_root else None
    layout = broadcast_object(layout, root_rank, name=base + ".layout", process_set=process_set)
    if is_root:
        tensors = local
    else:
        slots = sorted(_slots(layout, []), key=lambda s: s.index)
        tensors = [torch.empty(s.shape, dtype=s.dtype) for s in slots]
    handles = [broadcast_async_(t, root_rank, name="%s.%d" % (base, i),
                                    process_set=process_set)
               for i, t in enumerate(tensors)]
    for h in handles:
        synchronize(h)
    if not is_root:
        optimizer.load_state_dict(_fill_tensors(layout, tensors))

