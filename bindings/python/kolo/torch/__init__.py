"""kolo.torch: the horovod.torch API on the kolo engine.

    import kolo.torch as hvd      # was: import horovod.torch as hvd
    hvd.init()
    ...
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Run N copies with ``kolorun -np N python script.py``.
"""
import warnings as _warnings

from kolo import _kolo
from kolo._kolo import (  # noqa: F401
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
from kolo.torch.ops import (  # noqa: F401
    Average,
    Handle,
    Max,
    Min,
    Product,
    ReduceOp,
    Sum,
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    join,
    poll,
    reducescatter,
    reducescatter_async,
    synchronize,
)
from kolo.torch.optimizer import DistributedOptimizer  # noqa: F401
from kolo.torch import elastic  # noqa: F401,E402  (hvd.elastic.run, TorchState, ...)
from kolo.torch.elastic import HostsUpdatedInterrupt  # noqa: F401,E402

__version__ = _kolo.build_info()["version"]

# For scripts that catch horovod's name for "the job cannot go on".
HorovodInternalError = KoloInternalError

_BUILD = _kolo.build_info()


def init(comm=None, process_sets=None):
    """Joins the job started by kolorun (or torchrun, mpirun, Slurm; no
    launcher: a job of size 1). comm and process_sets are Horovod arguments
    kolo does not support; they must be left at None."""
    if comm is not None or process_sets is not None:
        raise NotImplementedError("kolo.torch.init: comm= and process_sets= are not supported")
    _kolo.init()


def shutdown():
    """Leaves the job; pending operations fail. init() may be called again."""
    _kolo.shutdown()


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline (rank r > 0 writes
    <file>.rank<r>.json). mark_cycles follows KOLO_TIMELINE_MARK_CYCLES,
    which is read at init()."""
    if mark_cycles and not _kolo.runtime_config()["timeline_mark_cycles"]:
        _warnings.warn("start_timeline(mark_cycles=True): set KOLO_TIMELINE_MARK_CYCLES=1 "
                       "before init() to mark cycles", stacklevel=2)
    _kolo.start_timeline(str(file_path))


def stop_timeline():
    """Stops the timeline; returns once its file is complete."""
    _kolo.stop_timeline()


def gloo_built():
    return _BUILD["gloo"]


def mpi_built():
    return _BUILD["mpi"]


def nccl_built():
    return _BUILD["nccl"]


def cuda_built():
    return _BUILD["cuda"]


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def gloo_enabled():
    """True when this job's CPU collectives run over Gloo."""
    return _kolo.runtime_config()["cpu_operations"] == "gloo"


def mpi_enabled():
    """True when this job's CPU collectives run over MPI."""
    return _kolo.runtime_config()["cpu_operations"] == "mpi"


def mpi_threads_supported():
    return mpi_enabled()


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    return local_size() * cross_size() == size()
