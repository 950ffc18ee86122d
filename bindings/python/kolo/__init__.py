"""kolo: Horovod-style data-parallel training on one C++ engine.

``import kolo`` imports no framework. It gives the process API (``init``,
``shutdown``, ``rank``, ``size``, process sets, the timeline), the
collectives on arrays (``allreduce``, ``allgather``, ``broadcast``,
``alltoall``, ``reducescatter``, their grouped and async variants,
``barrier``, ``join``, ``broadcast_object``, ``allgather_object``: NumPy
arrays in and out, or any host array with DLPack or the buffer protocol),
the error classes shared by every framework binding, and ``kolo.run``
(horovod.run: a function on every rank of a kolorun job, results in rank
order; ``kolo.runner``). The PyTorch API lives in :mod:`kolo.torch`, which
needs torch and a kolo built with it (``kolo._kolo_torch``).
"""
from kolo import _kolo
from kolo._kolo import (  # noqa: F401
    KoloError,
    KoloInternalError,
    KoloInvalidArgumentError,
    KoloMismatchError,
)

__version__ = _kolo.build_info()["version"]

from kolo.common.basics import (  # noqa: E402,F401
    ccl_built,
    cross_rank,
    cross_size,
    ddl_built,
    gloo_built,
    gloo_enabled,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    rank,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)
from kolo.common.process_sets import (  # noqa: E402,F401
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from kolo.common.arrays import (  # noqa: E402,F401
    Adasum,
    Average,
    Handle,
    Max,
    Min,
    Product,
    ReduceOp,
    Sum,
    allgather,
    allgather_async,
    allgather_object,
    allreduce,
    allreduce_async,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_async,
    broadcast_object,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_async,
    grouped_reducescatter,
    grouped_reducescatter_async,
    join,
    poll,
    reducescatter,
    reducescatter_async,
    synchronize,
)
from kolo.common import elastic  # noqa: E402,F401  (kolo.elastic.run, ObjectState)
from kolo.runner import run  # noqa: E402,F401  (horovod.run)
