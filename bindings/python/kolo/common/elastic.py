"""Elastic training without a framework (horovod.common.elastic's part):
the State protocol, ObjectState for picklable values, and run(), the loop
that re-forms the world after a failure or a host change and calls the
training function again. kolo.torch.elastic re-exports them and adds
TorchState.

Usage::

    import kolo
    from kolo.common import elastic

    kolo.init()
    state = elastic.ObjectState(epoch=0, weights=np.zeros(10))

    @elastic.run
    def train(state):
        ...
        state.commit()

    train(state)
"""
import copy
import functools

from kolo import _kolo
from kolo._kolo import KoloInternalError
from kolo.common import process_sets as _process_sets
from kolo.common.arrays import broadcast_object

class HostsUpdatedInterrupt(RuntimeError):
    """Raised on every rank together by State.commit() / check_host_updates()
    when the driver changed the host set. Not a failure: run() re-forms the
    world without rolling the state back. skip_sync is Horovod's field; kolo
    always syncs."""

    def __init__(self, skip_sync=False):
        super().__init__("the host set changed; re-forming the world (not a failure)")
        self.skip_sync = skip_sync


class State:
    """Everything that must be equal on every rank and survive a reset.

    Subclasses implement save() (a copy in memory), restore() (back to that
    copy) and sync() (rank 0's state onto every rank; collective)."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions run after every re-initialisation, before the state is
        synced (rescale the learning rate with hvd.size(), ...)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Runs the registered reset callbacks in order (run() calls it after
        every re-initialisation)."""
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res=None):
        """Horovod's notification hook; kolo asks the driver in
        check_host_updates() instead, so this does nothing."""

    def commit(self):
        """save(), then check_host_updates()."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Rank 0 asks the driver whether the host set changed and tells every
        rank; raises HostsUpdatedInterrupt on every rank when it did.
        Collective in an elastic job."""
        if _kolo.elastic_hosts_updated():
            raise HostsUpdatedInterrupt(False)

    def save(self):
        """Copies the state in memory (what restore() returns to). Local;
        commit() calls it."""
        raise NotImplementedError()

    def restore(self):
        """Puts back the copy of the last save(). Local; run() calls it after
        a peer failed."""
        raise NotImplementedError()

    def sync(self):
        """Makes every rank's state rank 0's. Collective: every rank calls
        it (run() does, after every reset)."""
        raise NotImplementedError()


class ObjectState(State):
    """Picklable Python values, given as keyword arguments and exposed as
    attributes; sync() broadcasts rank 0's."""

    def __init__(self, bcast_object=broadcast_object, get_rank=_kolo.rank, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        """Deep-copies the current attribute values."""
        self._saved_state = {attr: copy.deepcopy(getattr(self, attr))
                             for attr in self._saved_state}

    def restore(self):
        """Sets the attributes back to the last save()."""
        self._set_attrs()

    def sync(self):
        """Broadcasts rank 0's attribute values (one pickled object) and
        takes them as the saved state too. Collective."""
        if self._saved_state:
            current = {attr: getattr(self, attr) for attr in self._saved_state}
            self._saved_state = self._bcast_object(current)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))


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
    kolo.init() and the first call (a new worker joins at that sync).

    Outside an elastic job the state is synced once and failures propagate.

    Args:
        func: called as ``func(state, *args, **kwargs)``; state is a State
            (an ObjectState, or a framework's: kolo.torch.elastic.TorchState) whose commit() it calls regularly.

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
        def on_reset():
            _process_sets._after_reset()
            state.on_reset()

        # The core's loop (kolo::elastic::run), the one LibTorch programs
        # run: outside an elastic job it syncs once and calls func.
        return _kolo.elastic_run(state, lambda: func(state, *args, **kwargs), on_reset,
                                 HostsUpdatedInterrupt)
    return wrapper


__all__ = ["HostsUpdatedInterrupt", "ObjectState", "State", "run", "worker_id", "world_version"]
