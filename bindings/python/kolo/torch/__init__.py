"""kolo.torch: the horovod.torch API on the kolo engine.

Usage::

    import kolo.torch as hvd      # was: import horovod.torch as hvd
    hvd.init()
    ...
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Run N copies with ``kolorun -np N python script.py``.
"""
import sys as _sys

from kolo import _build_config

try:
    import torch as _torch  # loads libtorch and its Python glue before _kolo_torch
except ImportError as _e:
    raise ImportError(
        "kolo.torch needs torch, which %s cannot import (%s): install torch (pip install "
        "torch), then rebuild kolo for it: %s. Without torch, `import kolo` gives the "
        "framework-free API (collectives on NumPy arrays)"
        % (_sys.executable, _e, _build_config.REBUILD_COMMAND.format(python=_sys.executable))
    ) from None

# _kolo_torch links the LibTorch it was built against; under another torch
# it would fail with undefined symbols or misbehave, so stop here first.
if not _build_config.TORCH_VERSION:
    raise ImportError(
        "kolo.torch: this kolo was built without torch (%s had none then), so it has no "
        "kolo._kolo_torch; `import kolo` gives the framework-free API. Rebuild kolo for this "
        "torch: %s" % (_build_config.PYTHON,
                       _build_config.REBUILD_COMMAND.format(python=_sys.executable)))
if _torch.__version__ != _build_config.TORCH_VERSION:
    raise ImportError(
        "kolo was built against torch %s, but %s imports torch %s (%s). Rebuild kolo "
        "for this torch: %s" % (
            _build_config.TORCH_VERSION, _sys.executable, _torch.__version__,
            _torch.__file__, _build_config.REBUILD_COMMAND.format(python=_sys.executable)))

from kolo import _kolo  # noqa: E402
from kolo import _kolo_torch  # noqa: E402,F401
from kolo._kolo import (  # noqa: F401,E402
    KoloError,
    KoloInternalError,
    KoloInvalidArgumentError,
    KoloMismatchError,
    cross_rank,
    cross_size,
    is_initialized,
    local_rank,
    local_size,
    rank,
    size,
)
from kolo.torch.compression import Compression  # noqa: F401
from kolo.torch.functions import (  # noqa: F401
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from kolo.torch.exchange_ops import (  # noqa: F401
    allgather,
    allgather_async,
    grouped_allgather,
    grouped_allgather_async,
    alltoall,
    alltoall_async,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
)
from kolo.torch.ops import (  # noqa: F401
    Adasum,
    Average,
    Max,
    Min,
    Product,
    ReduceOp,
    Sum,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    reducescatter,
    reducescatter_async,
    grouped_reducescatter,
    grouped_reducescatter_async,
)
from kolo.torch.sync import (  # noqa: F401
    Handle,
    barrier,
    join,
    poll,
    synchronize,
)
from kolo.torch.optimizer import DistributedOptimizer  # noqa: F401
from kolo.torch.sparse import sparse_allreduce_async  # noqa: F401
from kolo.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
from kolo.torch.process_sets import (  # noqa: F401
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from kolo.common.basics import (  # noqa: F401,E402  (init, shutdown, what kolo runs with)
    ccl_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    init,
    is_homogeneous,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    rocm_built,
    shutdown,
    start_timeline,
    stop_timeline,
)
from kolo.torch import elastic  # noqa: F401,E402  (hvd.elastic.run, TorchState, ...)
from kolo.torch.elastic import HostsUpdatedInterrupt  # noqa: F401,E402
from kolo.torch import distributed  # noqa: F401,E402  (registers the "kolo" c10d backend)

__version__ = _kolo.build_info()["version"]

# For scripts that catch horovod's name for "the job cannot go on".
HorovodInternalError = KoloInternalError
"""Horovod's name for KoloInternalError (the same class), for scripts that
catch ``hvd.HorovodInternalError``."""

_BUILD = _kolo.build_info()
# Where the CUDA toolkit is installed, kolo's core builds its CUDA path even
# against a torch without CUDA (Debian's 1.13); no CUDA tensor can reach it
# then, so the build reports no CUDA and no NCCL.
_TORCH_HAS_CUDA = _torch.version.cuda is not None


def nccl_built():
    """The NCCL version kolo was built with (e.g. 22809 for 2.28.9), 0
    without NCCL or with a torch that has no CUDA. Horovod returns a bool;
    the version is truthy likewise."""
    return int(_BUILD["nccl_version"]) if _TORCH_HAS_CUDA else 0


def cuda_built():
    """True when this kolo was built with CUDA against a torch with CUDA
    (collectives on CUDA tensors)."""
    return bool(_BUILD["cuda"]) and _TORCH_HAS_CUDA
