"""Each error raises the right Python exception, with kolo's message, on
every rank; the engine keeps working afterwards."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import kolo
import kolo.torch as hvd
from conftest import KOLORUN, TORCH_LAUNCH_VARIABLES


def engine_still_works(name):
    n = hvd.size()
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum, name=name).sum().item() == 2 * n


def test_exception_hierarchy():
    assert issubclass(hvd.KoloError, RuntimeError)
    assert issubclass(hvd.KoloInternalError, hvd.KoloError)
    assert issubclass(hvd.KoloMismatchError, RuntimeError)
    # Horovod scripts catch bad arguments and cross-rank disagreements about
    # them as ValueError.
    assert issubclass(hvd.KoloMismatchError, ValueError)
    assert issubclass(hvd.KoloInvalidArgumentError, ValueError)
    assert issubclass(hvd.KoloInvalidArgumentError, RuntimeError)
    assert hvd.KoloInternalError is kolo.KoloInternalError


def test_shape_mismatch_fails_on_every_rank():
    t = torch.ones(3 + hvd.rank())
    with pytest.raises(hvd.KoloMismatchError) as info:
        hvd.allreduce(t, op=hvd.Sum, name="err.shape")
    msg = str(info.value)
    assert "err.shape" in msg and "rank" in msg
    engine_still_works("err.shape.after")


def test_dtype_mismatch_fails_on_every_rank():
    t = torch.ones(3, dtype=torch.float32 if hvd.rank() == 0 else torch.float64)
    with pytest.raises(hvd.KoloMismatchError, match="err.dtype"):
        hvd.allreduce(t, op=hvd.Sum, name="err.dtype")
    engine_still_works("err.dtype.after")


def test_op_mismatch_fails_on_every_rank():
    op = hvd.Sum if hvd.rank() == 0 else hvd.Max
    with pytest.raises(hvd.KoloMismatchError, match="err.op"):
        hvd.allreduce(torch.ones(3), op=op, name="err.op")
    engine_still_works("err.op.after")


def test_root_mismatch_fails_on_every_rank():
    root = 0 if hvd.rank() == 0 else 1
    with pytest.raises(hvd.KoloMismatchError, match="err.root"):
        hvd.broadcast(torch.ones(3), root, name="err.root")
    engine_still_works("err.root.after")


def test_uneven_alltoall_without_splits_is_a_value_error_on_every_rank():
    if hvd.size() == 1:
        pytest.skip("one rank takes any number of rows")
    # size + 1 rows cannot be split evenly among size ranks (no splits given).
    rows = hvd.size() + 1
    with pytest.raises(ValueError, match="err.a2a.uneven") as info:
        hvd.alltoall(torch.ones(rows, 2), name="err.a2a.uneven")
    assert isinstance(info.value, kolo.KoloError)
    engine_still_works("err.a2a.uneven.after")


def test_mismatch_is_catchable_as_value_error():
    if hvd.size() == 1:
        pytest.skip("a mismatch needs two ranks")
    t = torch.ones(3 + hvd.rank())
    try:
        hvd.allreduce(t, op=hvd.Sum, name="err.valueerror")
    except ValueError as e:
        assert "err.valueerror" in str(e)
    else:
        raise AssertionError("a shape mismatch was not raised as ValueError")
    engine_still_works("err.valueerror.after")


def test_async_error_surfaces_at_synchronize():
    h = hvd.allreduce_async(torch.ones(2 + hvd.rank()), op=hvd.Sum, name="err.async")
    with pytest.raises(hvd.KoloMismatchError, match="err.async"):
        hvd.synchronize(h)
    engine_still_works("err.async.after")


@pytest.mark.parametrize("make,needle", [
    (lambda: hvd.allreduce(torch.zeros(2, dtype=torch.complex64), name="err.cplx"),
     "dtype ComplexFloat is not supported"),
    (lambda: hvd.allgather(torch.zeros(2, dtype=torch.complex128), name="err.cdouble"),
     "allgather 'err.cdouble': dtype ComplexDouble is not supported"),
    (lambda: hvd.allreduce(torch.eye(3).to_sparse(), name="err.sparse"), "only dense"),
    (lambda: hvd.allreduce(torch.ones(2, dtype=torch.bool), op=hvd.Sum, prescale_factor=2.0,
                           name="err.boolscale"), "not defined for bool tensors"),
    (lambda: hvd.broadcast(torch.ones(2), 17, name="err.badroot"), "root rank 17"),
    (lambda: hvd.allreduce(torch.empty(2, device="meta"), name="err.meta"),
     "must be on the CPU or a CUDA device, got meta"),
], ids=["complex", "complex128", "sparse", "boolscale", "badroot", "meta"])
def test_bad_tensors_are_value_errors(make, needle):
    with pytest.raises(ValueError) as info:
        make()
    assert isinstance(info.value, hvd.KoloInvalidArgumentError)
    assert needle in str(info.value)
    engine_still_works("err.bad.after")


def test_duplicate_name_in_flight():
    # Rank 0's 'err.dup' is surely in flight at its second try: the other
    # ranks submit theirs only after that try (they learn of it through a
    # broadcast), so it cannot have completed.
    if hvd.rank() == 0:
        h = hvd.allreduce_async(torch.ones(2), name="err.dup")
        with pytest.raises(hvd.KoloInvalidArgumentError, match="err.dup"):
            hvd.allreduce_async(torch.ones(2), name="err.dup")
        hvd.broadcast_object("tried", 0, name="err.dup.tried")
    else:
        assert hvd.broadcast_object(None, 0, name="err.dup.tried") == "tried"
        h = hvd.allreduce_async(torch.ones(2), name="err.dup")
    hvd.synchronize(h)


def test_alltoall_bad_splits():
    with pytest.raises(hvd.KoloInvalidArgumentError):
        hvd.alltoall(torch.ones(2), splits=[5] * hvd.size(), name="err.splits")
    engine_still_works("err.splits.after")


def test_python_argument_errors():
    with pytest.raises(ValueError, match="op="):
        hvd.allreduce(torch.ones(1), average=True, op=hvd.Sum)
    with pytest.raises(ValueError, match="op must be"):
        hvd.allreduce(torch.ones(1), op="sum")
    with pytest.raises(ValueError, match="invalid params"):
        hvd.broadcast_parameters(42, root_rank=0)


def _child_env():
    # Outside any job: neither kolorun's nor torch's (env://) variables.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KOLO_", "OMPI_", "PMI_")) and k not in TORCH_LAUNCH_VARIABLES}
    env["KOLO_TIMEOUT"] = "20"
    return env


def test_not_initialized_is_a_value_error():
    # A fresh interpreter outside any job: queries before init() raise.
    code = textwrap.dedent("""
        import kolo.torch as hvd
        try:
            hvd.rank()
        except ValueError as e:
            print("OK", e)
        hvd.init(); print("SIZE", hvd.size()); hvd.shutdown()
        try:
            hvd.allreduce(__import__("torch").ones(1))
        except ValueError as e:
            print("AFTER", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=_child_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "OK" in out.stdout and "init" in out.stdout
    assert "SIZE 1" in out.stdout and "AFTER" in out.stdout


@pytest.mark.skipif(not KOLORUN, reason="KOLO_TEST_KOLORUN is not set (ctest sets it)")
def test_peer_failure_is_kolo_internal_error(tmp_path):
    # Rank 0 of this job starts a 2-rank job in which rank 1 dies; the
    # survivor must get KoloInternalError, not hang. Other ranks wait.
    if hvd.rank() == 0:
        script = tmp_path / "peer_dies.py"
        script.write_text(textwrap.dedent("""
            import os, sys, torch
            import kolo.torch as hvd
            hvd.init()
            hvd.allreduce(torch.ones(1), name="warmup")
            if hvd.rank() == 1:
                os._exit(0)
            try:
                hvd.allreduce(torch.ones(1), name="after.death")
                print("NO ERROR")
            except hvd.KoloInternalError as e:
                print("INTERNAL", type(e).__name__, e)
                sys.stdout.flush()
                os._exit(0)
        """))
        out = subprocess.run([KOLORUN, "-np", "2", sys.executable, str(script)],
                             env=_child_env(), capture_output=True, text=True, timeout=90)
        assert "INTERNAL KoloInternalError" in out.stdout, out.stdout + out.stderr
    hvd.barrier()
