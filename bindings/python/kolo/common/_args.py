"""Argument checks of the framework-free API (kolo.allreduce and friends).

Each check names the function and the argument that was wrong, and raises
ValueError (as Horovod does), never a binding's TypeError. ``fn`` is the
function as the user called it ("kolo.allreduce").
"""
import operator
import warnings

from kolo import _kolo
from kolo.common.process_sets import _id

_INT32_MAX = 2 ** 31 - 1


def _name(name):
    return "" if name is None else str(name)


def _kind(value):
    # A framework's tensor (torch's prints its whole contents) is named, not shown.
    if type(value).__name__ == "Tensor" and hasattr(value, "dim"):
        return "a tensor"
    return "%s %r" % (type(value).__name__, value)


def _as_int(value):
    """value as an int (ints, numpy ints, 0-d integer arrays), None for
    anything else, bools included."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _scale(value, fn, what):
    """A scale factor as a float (ints, floats, numpy scalars)."""
    if not isinstance(value, (str, bytes)):
        try:
            return float(value)
        except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several
            pass
    raise ValueError("%s: %s must be a number, got %s" % (fn, what, _kind(value)))


def _rank_arg(value, fn, what="root_rank"):
    """A rank of the job as an int."""
    rank = _as_int(value)
    if rank is None:
        raise ValueError("%s: %s must be an int rank, got %s" % (fn, what, _kind(value)))
    if not 0 <= rank <= _INT32_MAX:
        raise ValueError("%s: %s=%d is not a rank (ranks are 0 .. size-1)" % (fn, what, rank))
    return rank


def _sid(process_set):
    """The engine id of process_set (ValueError for anything else)."""
    set_id = _id(process_set)
    if not 0 <= set_id <= _INT32_MAX:
        raise ValueError("process_set id %d does not exist" % set_id)
    return set_id


def _where(fn):
    return "%s: " % fn if fn else ""


def _check_op(op, fn, api="kolo"):
    """op, checked to be a ReduceOp; api names the module its constants are
    spelled from in the message ("kolo", "kolo.torch")."""
    if not isinstance(op, _kolo.ReduceOp):
        raise ValueError("%sop must be one of %s.Average, Sum, Min, Max, Product, Adasum; "
                         "got %r" % (_where(fn), api, op))
    return op


def _resolve_op(op, average, fn, api="kolo"):
    """op wins; the legacy average= flag maps to Average/Sum; the default is
    Average, as in horovod.torch."""
    if op is not None and average is not None:
        raise ValueError("%spass either op= or the deprecated average=, not both" % _where(fn))
    if average is not None:
        warnings.warn("average= is deprecated: use op=%s.Average or Sum" % api,
                      DeprecationWarning, stacklevel=4)
        return _kolo.ReduceOp.Average if average else _kolo.ReduceOp.Sum
    if op is None:
        return _kolo.ReduceOp.Average
    return _check_op(op, fn, api)
