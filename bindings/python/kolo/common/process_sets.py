"""Process sets: subsets of the ranks that run collectives among themselves.

Usage::

    even = hvd.ProcessSet([0, 2])
    hvd.init(process_sets=[even])              # static, or later:
    odd = hvd.add_process_set([1, 3])          # dynamic (always allowed)
    hvd.allreduce(t, process_set=even)         # negotiated among ranks 0 and 2
    hvd.remove_process_set(odd)

As in Horovod, add_process_set and remove_process_set must be called by every
rank, with the same ranks, in the same order; kolo checks that they agree.
Unlike Horovod, adding and removing sets needs no HOROVOD_DYNAMIC_PROCESS_SETS
setting: ``init(process_sets="dynamic")`` is accepted and means nothing more.
Roots (``root_rank``) stay ranks of the job; allgather and alltoall order the
blocks by the set's rank order, and ``ProcessSet.rank()`` is this process's
place in that order.
"""
from kolo import _kolo


class ProcessSet:
    """A set of ranks, registered with kolo by init(process_sets=[...]) or
    add_process_set(), which sets ``process_set_id``.

    Args:
        ranks_or_comm (list[int]): ranks of the job, any order (kept
            sorted in ``ranks``). Horovod also takes an MPI communicator
            here; kolo does not.

    Raises:
        ValueError: not a list of int ranks.
    """

    def __init__(self, ranks_or_comm):
        if not hasattr(ranks_or_comm, "__iter__") or isinstance(ranks_or_comm, (str, bytes)):
            raise ValueError("ProcessSet takes a list of ranks (kolo does not take MPI "
                             "communicators); got %r" % (ranks_or_comm,))
        ranks = list(ranks_or_comm)
        if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks):
            raise ValueError("ProcessSet takes a list of int ranks, got %r" % (ranks,))
        for r in ranks:
            if not 0 <= r < 2 ** 31:
                raise ValueError("ProcessSet: %d is not a rank (ranks are 0 .. size-1), in %r"
                                 % (r, ranks))
        self.ranks = sorted(ranks)
        self.process_set_id = None
        self.mpi_comm = None

    def _id(self):
        if self.process_set_id is None:
            raise ValueError("%s is not registered: pass it to hvd.init(process_sets=[...]) "
                             "or hvd.add_process_set() first" % self)
        return self.process_set_id

    def size(self):
        """Number of ranks in the set (None before it is registered)."""
        if self.process_set_id is None or not _kolo.is_initialized():
            return None
        return len(_kolo.process_set_ranks(self.process_set_id))

    def rank(self):
        """This process's rank within the set (its place in ``ranks``), -1
        when it is not a member, None before the set is registered. Roots of
        broadcasts stay ranks of the job (hvd.rank()), not this."""
        if self.process_set_id is None or not _kolo.is_initialized():
            return None
        ranks = _kolo.process_set_ranks(self.process_set_id)
        me = _kolo.rank()
        return ranks.index(me) if me in ranks else -1

    def included(self):
        """Whether this process belongs to the set (None before registration)."""
        if self.process_set_id is None or not _kolo.is_initialized():
            return None
        return _kolo.rank() in _kolo.process_set_ranks(self.process_set_id)

    def invalidate(self):
        """Forgets the registration (remove_process_set() and elastic resets
        call it); the object cannot be used in operations afterwards."""
        self.process_set_id = None
        self.ranks = None

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (
            self.process_set_id, self.ranks, self.mpi_comm)

    __repr__ = __str__


# Every rank; its ranks are filled in by init().
global_process_set = ProcessSet([])
"""The set of every rank (id 0), the default process_set of every
operation; its ranks are filled in by init()."""
global_process_set.process_set_id = 0

_registered = {0: [global_process_set]}  # id -> ProcessSet objects with that id


def _id(process_set):
    """The engine id of a ProcessSet (or of an int id, accepted too)."""
    if process_set is None:
        return 0
    if isinstance(process_set, ProcessSet):
        return process_set._id()
    if isinstance(process_set, int) and not isinstance(process_set, bool):
        return process_set
    raise ValueError("process_set must be a kolo.ProcessSet (kolo.torch.ProcessSet is the same "
                     "class), got %r" % (process_set,))


def _setup(static_sets):
    """After the engine started: ids for the sets given to init(), the
    global set's ranks. static_sets: the ProcessSet objects, in id order."""
    _registered.clear()
    _registered[0] = [global_process_set]
    global_process_set.ranks = list(range(_kolo.size()))
    for i, ps in enumerate(static_sets):
        ps.process_set_id = i + 1
        _registered.setdefault(ps.process_set_id, []).append(ps)


def _adopt(static_sets):
    """init() while initialized: the given sets take the ids of the existing
    sets with their ranks (ValueError when there is none)."""
    by_ranks = {tuple(_kolo.process_set_ranks(i)): i for i in _kolo.process_set_ids()}
    for ps in static_sets:
        set_id = by_ranks.get(tuple(ps.ranks))
        if set_id is None:
            raise ValueError("init(process_sets=...): kolo is already initialized and has no "
                             "process set of ranks %s; add it with add_process_set(), or call "
                             "shutdown() before init()" % ps.ranks)
        ps.process_set_id = set_id
        if ps not in _registered.setdefault(set_id, []):
            _registered[set_id].append(ps)


def _after_reset():
    """An elastic reset started a new engine: the static sets came back with
    their ids (the C++ side rebuilds them), the dynamic ones ended with the
    old world and their ProcessSet objects are invalidated (add them again
    in a reset callback)."""
    alive = set(_kolo.process_set_ids())
    for set_id in list(_registered):
        if set_id not in alive:
            for ps in _registered.pop(set_id):
                ps.invalidate()
    global_process_set.ranks = list(range(_kolo.size()))


def _static_ranks(process_sets):
    """init()'s process_sets argument as ProcessSet objects ([] for None and
    "dynamic")."""
    if process_sets is None or process_sets == "dynamic":
        return []
    if isinstance(process_sets, (str, bytes)) or not hasattr(process_sets, "__iter__"):
        raise ValueError('init(process_sets=...) takes a list of ProcessSet objects or '
                         '"dynamic", got %r' % (process_sets,))
    out = []
    for ps in process_sets:
        out.append(ps if isinstance(ps, ProcessSet) else ProcessSet(ps))
    return out


def add_process_set(process_set):
    """Registers a set of ranks (a ProcessSet or a list of ranks) and returns
    the ProcessSet. Every rank must call it with the same ranks, in the same
    order of add/remove calls. Raises ValueError for bad ranks or a set with
    the same ranks as an existing one."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError("%s is already registered" % process_set)
    process_set.process_set_id = _kolo.add_process_set(process_set.ranks)
    _registered.setdefault(process_set.process_set_id, []).append(process_set)
    return process_set


def remove_process_set(process_set):
    """Removes a set from every rank (collective, like add_process_set) and
    invalidates its ProcessSet objects. Returns False for the global set,
    which cannot be removed, and for a set that is not registered."""
    if not isinstance(process_set, ProcessSet):
        raise ValueError("remove_process_set takes a ProcessSet, got %r" % (process_set,))
    set_id = process_set.process_set_id
    if set_id is None or set_id == 0:
        return False
    if set_id not in _kolo.process_set_ids():
        return False
    _kolo.remove_process_set(set_id)
    for ps in _registered.pop(set_id, [process_set]):
        ps.invalidate()
    process_set.invalidate()
    return True
