"""Work objects behave as gloo's; what kolo does not support fails with a
clear error at the call; and what kolo adds over gloo: ranks that make
different calls fail at that call naming both, and a call some rank never
makes is named, with that rank, in a warning and in every rank's error.
"""
import datetime
import os
import re
import time

import pytest
import torch
import torch.distributed as dist

from conftest import GLOO, KOLO, TORCH2, thread_names


def outcome(fn):
    """What calling fn gives: its value, or the type of what it raised."""
    try:
        return ("value", fn())
    except Exception as e:  # noqa: BLE001  (compared between backends)
        return ("raised", type(e))


def test_works_wait_poll_exception_and_future_as_gloos(rank, size):
    seen = {}
    for group in (GLOO, KOLO):
        t = torch.full((4,), float(rank + 1))
        work = dist.all_reduce(t, group=group, async_op=True)
        assert work.wait() is True
        assert work.is_completed()
        # Deprecated in torch, and exception() cannot even return in 1.13:
        # whatever gloo's give, kolo's give.
        seen[group] = [outcome(work.is_success), outcome(work.exception)]
        fut = work.get_future()
        value = fut.wait()
        assert isinstance(value, list) and torch.equal(value[0], t)
        assert torch.equal(t, torch.full((4,), float(size * (size + 1) // 2)))
        # Callbacks chain on the future, as DDP's communication hooks do.
        u = torch.ones(2)
        chained = dist.all_reduce(u, group=group, async_op=True).get_future().then(
            lambda f: f.value()[0] * 10)
        assert torch.equal(chained.wait(), torch.full((2,), 10.0 * size))
    assert seen[GLOO] == seen[KOLO], seen


def test_a_future_callback_may_wait_on_another_call(rank, size):
    """DDP's PowerSGD hook waits on a second all_reduce inside the first's
    callback: the callback must not run where the second one needs."""
    a, b = torch.ones(3), torch.ones(3)

    def second(fut):
        return dist.all_reduce(b, group=KOLO, async_op=True).get_future().wait()[0] + fut.value()[0]
    out = dist.all_reduce(a, group=KOLO, async_op=True).get_future().then(second).wait()
    assert torch.equal(out, torch.full((3,), 2.0 * size))


def test_wait_with_a_timeout_raises_and_the_work_goes_on(rank, size):
    """A wait(timeout) that runs out raises; the call is still pending, and
    a later wait completes it (gloo behaves so too)."""
    for group, other in ((GLOO, KOLO), (KOLO, GLOO)):
        t = torch.ones(2)
        if rank == 0:
            work = dist.all_reduce(t, group=group, async_op=True)
            with pytest.raises(RuntimeError):
                work.wait(timeout=datetime.timedelta(milliseconds=300))
            dist.barrier(group=other)  # now the others call
            work.wait()
        else:
            dist.barrier(group=other)
            dist.all_reduce(t, group=group)
        assert torch.equal(t, torch.full((2,), float(size)))


def test_unsupported_calls_raise_naming_what_to_use(rank, size):
    x = torch.zeros(2)
    with pytest.raises(NotImplementedError, match="sparse tensors are not supported"):
        dist.all_reduce(torch.eye(3).to_sparse(), group=KOLO)
    with pytest.raises(ValueError, match="BAND needs an integer or bool tensor, got Float"):
        dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND, group=KOLO)
    with pytest.raises(ValueError, match="is not another rank|should not be the same"):
        dist.send(x, rank, group=KOLO)
    # The group goes on.
    t = torch.ones(1)
    dist.all_reduce(t, group=KOLO)
    assert t.item() == size


def test_a_call_refused_on_one_rank_fails_on_every_rank(rank, size):
    if rank == 0:
        with pytest.raises(ValueError, match="needs an integer or bool tensor"):
            dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BOR, group=KOLO)
    else:
        with pytest.raises(RuntimeError, match="refused on this rank: .*needs an integer or bool"):
            dist.all_reduce(torch.ones(2), group=KOLO)
    t = torch.ones(1)
    dist.all_reduce(t, group=KOLO)
    assert t.item() == size


@pytest.mark.parametrize("case", ["shape", "dtype", "op", "root", "splits"])
def test_ranks_making_different_calls_fail_at_that_call_naming_both(case, rank, size):
    last = size - 1
    if case == "shape":
        work = lambda: dist.all_reduce(torch.ones(5 if rank == last else 4), group=KOLO)
        expect = (r"process group 0 #\d+: ranks made different calls \(they differ in shape\): "
                  r"rank 0 called all_reduce\(op=SUM\) on float32\[4\], rank %d called "
                  r"all_reduce\(op=SUM\) on float32\[5\]" % last)
    elif case == "dtype":
        work = lambda: dist.all_reduce(
            torch.ones(4, dtype=torch.float64 if rank == last else torch.float32), group=KOLO)
        expect = r"rank 0 called all_reduce\(op=SUM\) on float32\[4\], rank %d called " \
                 r"all_reduce\(op=SUM\) on float64\[4\]" % last
    elif case == "op":
        def work():
            t = torch.ones(4)
            if rank == last:
                dist.broadcast(t, src=0, group=KOLO)
            else:
                dist.all_reduce(t, group=KOLO)
        expect = r"rank 0 called all_reduce\(op=SUM\) on float32\[4\], rank %d called " \
                 r"broadcast\(src=0\) on float32\[4\]" % last
    elif case == "root":
        work = lambda: dist.broadcast(torch.ones(4), src=1 if rank == last else 0, group=KOLO)
        expect = r"rank 0 called broadcast\(src=0\) on float32\[4\], rank %d called " \
                 r"broadcast\(src=1\) on float32\[4\]" % last
    else:
        def work():
            out_splits = [1] * size
            if rank == last:
                out_splits = [2] + [1] * (size - 2) + [0]
            dist.all_to_all_single(torch.empty(size), torch.ones(size),
                                   output_split_sizes=out_splits, group=KOLO)
        expect = r"rank %d expects 2 rows from rank 0, which sends 1" % last
    with pytest.raises(RuntimeError, match=expect):
        work()
    # The next call goes through on every rank: the group is in step again.
    t = torch.ones(3)
    dist.all_reduce(t, group=KOLO)
    assert torch.equal(t, torch.full((3,), float(size)))


def test_a_call_one_rank_never_makes_is_named_then_fails_everywhere(rank, size, capfd):
    """Rank size-1 skips an all_reduce. Within KOLO_STALL_CHECK_TIME every
    rank logs the call and the missing rank; at the group's timeout every
    waiting rank's call fails with the same facts; nobody hangs. The group's
    timeout is shorter than the default group's and its stall check time
    another: both are its own, on the process's one engine (no loop thread
    more)."""
    loops = thread_names().count("kolo-loop")
    os.environ["KOLO_STALL_CHECK_TIME"] = "1"
    try:
        group = dist.new_group(backend="kolo", timeout=datetime.timedelta(seconds=4))
    finally:
        del os.environ["KOLO_STALL_CHECK_TIME"]
    assert thread_names().count("kolo-loop") == loops, "the group made an engine of its own"
    dist.all_reduce(torch.ones(1), group=group)  # #0, made by everyone
    skipper = size - 1
    began = time.monotonic()
    if rank != skipper:
        with pytest.raises(RuntimeError) as failure:
            dist.all_reduce(torch.ones(4), group=group)  # #1, never made by skipper
        message = str(failure.value)
        assert "stalled for more than 4.0 s (the process group's timeout)" in message, message
        assert re.search(r"process group \d+ #1: all_reduce\(op=SUM\) on float32\[4\], "
                         r"not called by ranks \[%d\]" % skipper, message), message
        assert time.monotonic() - began < 60
    dist.barrier(group=GLOO)  # everyone is past it: the skipper was never stuck
    log = capfd.readouterr().err
    assert re.search(r"1 call\(s\) made by some ranks but not by others for more than 1.0 s "
                     r"\(KOLO_STALL_CHECK_TIME\): process group \d+ #1: all_reduce\(op=SUM\) "
                     r"on float32\[4\], not called by ranks \[%d\]" % skipper, log), log
    # The stalled group is finished on every rank; the others go on.
    with pytest.raises(RuntimeError, match="stalled for more than"):
        dist.all_reduce(torch.ones(1), group=group)
    dist.destroy_process_group(group)
    t = torch.ones(1)
    dist.all_reduce(t, group=KOLO)
    assert t.item() == size


@pytest.mark.skipif(not TORCH2, reason="torch 1.13 has no uint16 or float8 tensors")
def test_a_dtype_kolo_does_not_move_is_a_value_error_naming_the_supported_ones(rank, size):
    for dtype in (torch.uint16, torch.float8_e4m3fn):
        with pytest.raises(ValueError, match="is not supported \\(supported: float32"):
            dist.all_reduce(torch.zeros(2, dtype=dtype), group=KOLO)
        with pytest.raises(ValueError, match="is not supported"):
            dist.broadcast(torch.zeros(2, dtype=dtype), src=0, group=KOLO)


@pytest.mark.skipif(not TORCH2, reason="torch 1.13 has no DistBackendError")
def test_failures_surface_as_torchs_distributed_error(rank, size):
    with pytest.raises(dist.DistBackendError, match="ranks made different calls"):
        dist.all_reduce(torch.ones(2 if rank == 0 else 3), group=KOLO)


def test_object_collectives(rank, size):
    """all_gather_object, broadcast_object_list, gather_object and
    scatter_object_list (what torch.distributed.checkpoint uses) on kolo."""
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank, "text": "x" * rank}, group=KOLO)
    assert objs == [{"rank": r, "text": "x" * r} for r in range(size)]
    box = [("from", rank)] if rank == size - 1 else [None]
    dist.broadcast_object_list(box, src=size - 1, group=KOLO)
    assert box == [("from", size - 1)]
    gathered = [None] * size if rank == 0 else None
    dist.gather_object(rank * 10, gathered, dst=0, group=KOLO)
    if rank == 0:
        assert gathered == [r * 10 for r in range(size)]
    out = [None]
    dist.scatter_object_list(out, [str(r) for r in range(size)] if rank == 0 else None, src=0,
                             group=KOLO)
    assert out == [str(rank)]
