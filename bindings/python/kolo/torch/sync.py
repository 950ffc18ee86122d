"""Handles of asynchronous operations (poll, synchronize) and the control
operations join and barrier."""
import torch

from kolo import _kolo
from kolo.torch._args import _kind, _sid
from kolo.torch.process_sets import global_process_set


class Handle:
    """An asynchronous operation in flight: ``poll()``, ``wait()``.

    ``kolo.torch.poll(handle)`` and ``kolo.torch.synchronize(handle)`` do the
    same. Waiting releases the GIL. The result is computed once; waiting
    again returns it again.
    """

    __slots__ = ("_handles", "_finish", "_result", "_done")

    def __init__(self, handles, finish):
        self._handles = handles  # list of _kolo_torch.TensorHandle
        self._finish = finish    # (outputs, handles) -> result
        self._result = None
        self._done = False

    def poll(self):
        """True once the operation finished (successfully or not); never
        blocks."""
        return all(h.poll() for h in self._handles)

    def wait(self):
        """Blocks (without the GIL) until the operation finished.

        Returns:
            The operation's result (what the blocking variant returns).

        Raises:
            KoloMismatchError, KoloInvalidArgumentError, KoloInternalError:
                the operation's error, as the blocking variant raises it.
        """
        if not self._done:
            outputs = [h.wait() for h in self._handles]
            self._result = self._finish(outputs, self._handles)
            self._done = True
        return self._result


def _single(outputs, _handles):
    return outputs[0]


def _listed(outputs, _handles):
    return list(outputs)


def _check_handle(handle, fn):
    if not (hasattr(handle, "poll") and hasattr(handle, "wait")):
        raise ValueError("kolo.torch.%s: expected a handle returned by an *_async operation, "
                         "got %s" % (fn, _kind(handle)))
    return handle


def poll(handle):
    """True when the operation behind handle has finished."""
    return _check_handle(handle, "poll").poll()


def synchronize(handle):
    """Waits for handle and returns its result (raises the operation's error)."""
    return _check_handle(handle, "synchronize").wait()


def _copy_back(tensors):
    """finish() of in-place grouped operations: results into the inputs."""
    def finish(outputs, _h):
        with torch.no_grad():
            for target, out in zip(tensors, outputs):
                if out is not target:
                    target.copy_(out)
        return tensors
    return finish


# ---- control --------------------------------------------------------------------------------


def join(device=-1, process_set=global_process_set):
    """This rank has no more data: until every rank (of process_set) joined,
    it takes part in the set's operations with a neutral contribution:
    zeros for allreduce and reducescatter sums (the identity of Min, Max,
    Product), no rows for allgather and alltoall, and it receives
    broadcasts (it cannot be a root).

    Args:
        device: accepted for Horovod compatibility and ignored (kolo needs
            no device for join).
        process_set (ProcessSet): the ranks that join (default: all).

    Returns:
        int: the last rank (of the job) to join.

    Raises:
        KoloInternalError: a peer failed, timed out or shut down.
    """
    del device
    return _kolo.join(_sid(process_set))


def barrier(process_set=global_process_set):
    """Returns once every rank of process_set reached the barrier.

    Raises:
        KoloInvalidArgumentError: this rank is not in process_set.
        KoloInternalError: a peer failed, timed out or shut down.
    """
    _kolo.barrier(_sid(process_set))
