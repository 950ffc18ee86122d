"""kolo under torch.distributed: the ``"kolo"`` backend.

Importing :mod:`kolo.torch` (or this module) registers ``"kolo"`` with
:meth:`torch.distributed.Backend.register_backend`, for CPU and CUDA
tensors. Then any torch.distributed program runs on kolo's engine::

    import kolo.torch  # noqa: F401  (registers "kolo")
    import torch.distributed as dist

    dist.init_process_group("kolo")          # or "cpu:kolo,cuda:nccl"
    model = torch.nn.parallel.DistributedDataParallel(model)

``new_group(ranks, backend="kolo")`` (with ``use_local_synchronization=True``
too) and device meshes built on it work the same way: every kolo group is a
process set of the one engine the default group made, so all of a process's
groups share one background thread and one order of work. The default group
meets the other ranks through the store torch gives it (env://, tcp://,
file://, torchrun's); under kolorun, env:// finds what it needs in the
environment kolorun sets. ``dist.recv(t)`` without ``src`` receives from any
rank and returns the sender, as gloo does.

What kolo adds: every call is negotiated, so ranks that make different calls
at the same point (another op, dtype, shape, root or split sizes) fail at
that call with an error naming both calls and the ranks on each side, and a
call some ranks never make is named, with those ranks, in a warning after
``KOLO_STALL_CHECK_TIME`` and in every rank's error at the group's timeout.
"""
from datetime import timedelta as _timedelta

import torch.distributed as _dist

from kolo import _kolo, _kolo_torch

#: The backend's name, as ``init_process_group`` and ``new_group`` take it.
BACKEND = "kolo"

#: The class of kolo's process groups (a c10d backend).
ProcessGroupKolo = _kolo_torch.ProcessGroupKolo


def _seconds(timeout):
    if isinstance(timeout, _timedelta):
        return timeout
    return _timedelta(seconds=float(timeout))


def _create(options, backend_options=None):
    """torch.distributed's creator for a "kolo" group (extended API: it gets
    the store, the group's rank, size, timeout, name and global ranks)."""
    del backend_options  # kolo reads its settings from KOLO_* variables
    global_ranks = [int(r) for r in (options.global_ranks_in_group or [])]
    return _kolo_torch._create_process_group(
              store=options.store,
              rank=options.group_rank,
              size=options.group_size,
              timeout=_seconds(options.timeout),
              group_name=str(options.group_id),
              global_ranks=global_ranks,
          )


def _register():
    if BACKEND.upper() in getattr(_dist.Backend, "_plugins", {}):
        return
    try:
        _dist.Backend.register_backend(BACKEND, _create, extended_api=True,
                                       devices=["cpu", "cuda"])
    except TypeError:
        # torch 1.13: no devices argument (a plugin serves every device).
        _dist.Backend.register_backend(BACKEND, _create, extended_api=True)


if _dist.is_available():
    _register()
