"""The process-level API of every kolo binding, with no framework: init,
shutdown, identity, timeline and what the build and the job run with.
``import kolo`` exports it; kolo.torch re-exports it (as horovod.torch does
horovod.common's basics).
"""
import atexit as _atexit
import os as _os
import sys as _sys
import warnings as _warnings

from kolo import _kolo
from kolo._kolo import (  # noqa: F401  (re-exported: kolo and kolo.torch)
    cross_rank,
    cross_size,
    is_initialized,
    local_rank,
    local_size,
    rank,
    size,
)
from kolo.common import process_sets as _process_sets

_BUILD = _kolo.build_info()


def init(comm=None, process_sets=None):
    """Joins the job started by kolorun (or torchrun, mpirun, Slurm; no
    launcher: a job of size 1).

    Reads the KOLO_* configuration and the launcher's environment, meets the
    other ranks at the job's rendezvous store (bounded by KOLO_TIMEOUT) and
    starts kolo's engine. Calling init() again while initialized does
    nothing (as in Horovod); shutdown() first to start a new engine. After
    init(), an uncaught exception on this rank is reported to the other
    ranks as this rank's error before the process exits.

    Args:
        comm: an MPI communicator in Horovod; not supported (must be None).
        process_sets: ProcessSet objects (or lists of ranks) to create now,
            the same on every rank; they get ids 1, 2, ... in this order.
            "dynamic" is accepted for Horovod compatibility: kolo always
            allows add_process_set/remove_process_set.

    Raises:
        NotImplementedError: comm is given.
        ValueError: process_sets is malformed, or (when already
            initialized) names a set that does not exist.
        KoloInvalidArgumentError: (a ValueError) a malformed KOLO_* or
            launcher variable, or ranks that passed different process_sets.
        KoloInternalError: the rendezvous failed or timed out.
    """
    if comm is not None:
        raise NotImplementedError(
            "kolo.init(comm=...): kolo does not run on an existing mpi4py communicator; "
            "start the job with `kolorun --mpi -np N` (or mpirun) and call init() without comm")
    static = _process_sets._static_ranks(process_sets)
    if _kolo.is_initialized():
        # Horovod programs call init() again (its test suites do in every
        # test): a no-op, except that sets named here must exist already.
        _process_sets._adopt(static)
        return
    _kolo.init([ps.ranks for ps in static])
    _process_sets._setup(static)
    _install_excepthook()


def _install_excepthook():
    """An uncaught exception on this rank reaches the other ranks as this
    rank's error ("rank R failed: ValueError: ..."), instead of a bare
    "rank R shut down" while they wait for it."""
    if getattr(_sys.excepthook, "_kolo", False):
        return
    previous = _sys.excepthook

    def hook(kind, value, traceback):
        try:
            if _kolo.is_initialized():
                _kolo.abort("%s: %s" % (kind.__name__, value))
        except Exception:  # the engine may be gone already
            pass
        previous(kind, value, traceback)

    hook._kolo = True
    _sys.excepthook = hook


def shutdown():
    """Leaves the job; pending operations fail. init() may be called again.

    Idempotent. The other ranks' pending operations fail with a
    KoloInternalError naming this rank as shut down.
    """
    _kolo.shutdown()


def _shutdown_at_exit():
    # The engine stops while the interpreter and CUDA are still up, not in
    # static destruction, where CUDA may be gone and GPU work still pending,
    # and within KOLO_TIMEOUT: past it the process ends with exit code 1.
    try:
        _kolo.shutdown_at_exit()
    except Exception:  # nothing to report to at exit
        pass


_atexit.register(_shutdown_at_exit)


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline of this rank's operations.

    Replaces a timeline already running. Call it on every rank: rank r > 0
    writes file_path with ".rank<r>" inserted before a ".json" suffix.

    Args:
        file_path (str or os.PathLike): the file to write (rank 0's).
        mark_cycles (bool): kolo reads KOLO_TIMELINE_MARK_CYCLES at init()
            instead; True without that variable set only warns (unlike
            Horovod, where it takes effect here).

    Raises:
        ValueError: file_path is not a str or os.PathLike.
        KoloInvalidArgumentError: the file cannot be created, or kolo is not
            initialized.
    """
    if not isinstance(file_path, (str, _os.PathLike)):
        raise ValueError("kolo.start_timeline: file_path must be a str or os.PathLike, "
                         "got %s" % type(file_path).__name__)
    if mark_cycles and not _kolo.runtime_config()["timeline_mark_cycles"]:
        _warnings.warn("start_timeline(mark_cycles=True): set KOLO_TIMELINE_MARK_CYCLES=1 "
                       "before init() to mark cycles", stacklevel=2)
    _kolo.start_timeline(str(file_path))


def stop_timeline():
    """Stops the timeline; returns once its file is complete (valid JSON).

    Does nothing when no timeline runs. Raises KoloInvalidArgumentError
    before init().
    """
    _kolo.stop_timeline()


def gloo_built():
    """True: every kolo build has Gloo (control plane and CPU collectives)."""
    return _BUILD["gloo"]

def mpi_built():
    """True when this kolo was built with MPI (``kolorun --mpi``, mpirun)."""
    return _BUILD["mpi"]

def rocm_built():
    """False: kolo has no ROCm support."""
    return False

def ddl_built():
    """False: kolo has no IBM DDL support."""
    return False

def ccl_built():
    """False: kolo has no oneCCL support."""
    return False

def gloo_enabled():
    """True when this job's CPU collectives run over Gloo."""
    return _kolo.runtime_config()["cpu_operations"] == "gloo"

def mpi_enabled():
    """True when this job's CPU collectives run over MPI."""
    return _kolo.runtime_config()["cpu_operations"] == "mpi"

def mpi_threads_supported():
    """True when this job's CPU collectives run over MPI. kolo uses MPI only
    with at least MPI_THREAD_SERIALIZED (init() fails otherwise); Horovod's
    answer is about MPI_THREAD_MULTIPLE."""
    return mpi_enabled()

def is_homogeneous():
    """True when every host runs the same number of ranks
    (local_size() * cross_size() == size()). Raises before init()."""
    return local_size() * cross_size() == size()
