"""kolo.torch.elastic: elastic training, as horovod.torch.elastic.

Usage::

    import kolo.torch as hvd            # was: import horovod.torch as hvd
    hvd.init()
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        ...
        state.commit()

    train(state)

Start it with ``kolorun -np N --min-np M --max-np X --host-discovery-script
S python train.py`` (or ``-H``/``--hostfile`` for a fixed set of hosts).
"""
import functools

from kolo import _kolo
from kolo.torch import process_sets as _process_sets
from kolo._kolo import KoloInternalError
from kolo.torch.elastic.sampler import ElasticSampler
from kolo.torch.elastic.state import (  # noqa: F401
    HostsUpdatedInterrupt,
    ObjectState,
    State,
    TorchState,
    get_handler_registry,
    set_handler_registry,
)


def world_version():
    """kolo's own: the world this process is in (1, 2, ... as the driver
    re-forms it; 0 outside an elastic job)."""
    return _kolo.elastic_world_version()


def worker_id():
    """kolo's own: the driver's id of this worker process (-1 outside an
    elastic job); stable for the process's life, unlike its rank."""
    return _kolo.elastic_worker_id()


def run(func):
    """Decorator: runs func(state, ...) until it returns, across resets.

    When a peer fails (KoloInternalError, Horovod's HorovodInternalError)
    the state is restored to its last commit; when the host set changed
    (HostsUpdatedInterrupt from state.commit() / state.check_host_updates())
    it is kept. Then kolo is re-initialised in a new world (new rank and
    size), the reset callbacks run, the state is synced from the new rank 0
    (a survivor) and func is called again. No collective may run between
    hvd.init() and the first call (a new worker joins at that sync).

    Outside an elastic job the state is synced once and failures propagate.

    Args:
        func: called as ``func(state, *args, **kwargs)``; state is a State
            (usually a TorchState) whose commit() it calls regularly.

    Returns:
        The wrapper, called as func would be; it returns func's result.
        It raises what func raises other than KoloInternalError and
        HostsUpdatedInterrupt.

    Raises:
        KoloInternalError: re-forming the world failed (the job is ending,
            e.g. fewer workers than --min-np are left).
    """
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not _kolo.elastic_enabled():
            state.sync()
            state.save()
            return func(state, *args, **kwargs)
        reason = None
        while True:
            if reason is not None:
                # Errors here (the job is ending) are final.
                _kolo.elastic_reset(reason)
                _process_sets._after_reset()
                state.on_reset()
            try:
                _kolo.reset_names()
                state.sync()
                # The synced state is what a failure before the next commit
                # returns to (a new worker would otherwise restore its own).
                state.save()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt:
                reason = "the host set changed"
            except KoloInternalError as e:
                reason = str(e) or "a peer failed"
                state.restore()
    return wrapper


__all__ = [
    "ElasticSampler",
    "HostsUpdatedInterrupt",
    "ObjectState",
    "State",
    "TorchState",
    "run",
    "worker_id",
    "world_version",
]
