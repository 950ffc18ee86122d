"""No silent hangs: a job where ranks wait in different collectives ends with
an error naming the tensor and the missing ranks (KOLO_STALL_SHUTDOWN_TIME,
finite by default), also in an engine started after init/shutdown/init; an
uncaught exception on one rank reaches the others as that rank's error."""
import os
import subprocess
import sys
import textwrap

import pytest

import kolo.torch as hvd
from conftest import KOLORUN, TORCH_LAUNCH_VARIABLES

SCRIPT = textwrap.dedent("""
    import sys, torch
    import kolo.torch as hvd
    hvd.init()
    hvd.allreduce(torch.ones(1), name="warmup")
    hvd.shutdown()
    hvd.init()  # the second engine of this process
    # Rank 1 fails its own check and goes on to the barrier, while rank 0
    # waits in an allreduce that rank 1 never submits.
    try:
        if hvd.rank() == 1:
            try:
                raise AssertionError("check failed")
            except AssertionError:
                hvd.barrier()
        else:
            hvd.allreduce(torch.ones(1), name="loss")
        print("NO ERROR", flush=True)
    except hvd.KoloError as e:
        print("STALLED", hvd.rank(), type(e).__name__, e, flush=True)
    hvd.shutdown()
    hvd.init()  # a fresh engine after the failed one
    hvd.allreduce(torch.ones(1), name="again")
    # kolo's excepthook tells the peers; the pause keeps kolorun from
    # stopping rank 0 before it printed what it got.
    kolo_hook = sys.excepthook
    sys.excepthook = lambda *exc: (kolo_hook(*exc), __import__("time").sleep(3))
    if hvd.rank() == 1:
        raise ValueError("boom on rank 1")
    try:
        hvd.allreduce(torch.ones(1), name="waits.for.rank1")
    except hvd.KoloInternalError as e:
        print("PEER", e, flush=True)
""")


def _child_env(**extra):
    # Outside any job: neither kolorun's nor torch's (env://) variables.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KOLO_", "OMPI_", "PMI_")) and k not in TORCH_LAUNCH_VARIABLES}
    env.update(KOLO_TIMEOUT="20", KOLO_STALL_CHECK_TIME="1", KOLO_STALL_SHUTDOWN_TIME="2")
    env.update(extra)
    return env


@pytest.mark.skipif(not KOLORUN, reason="KOLO_TEST_KOLORUN is not set (ctest sets it)")
def test_stalled_job_ends_with_an_error_naming_tensor_and_ranks(tmp_path):
    if hvd.rank() == 0:
        script = tmp_path / "stall.py"
        script.write_text(SCRIPT)
        out = subprocess.run([KOLORUN, "-np", "2", sys.executable, str(script)],
                             env=_child_env(), capture_output=True, text=True, timeout=120)
        text = out.stdout + out.stderr
        assert "NO ERROR" not in text, text
        for rank in (0, 1):
            line = next((l for l in out.stdout.splitlines() if "STALLED %d" % rank in l), "")
            assert "KOLO_STALL_SHUTDOWN_TIME" in line, text
            assert "'loss' missing on ranks [1]" in line, text
            assert "'kolo.barrier' missing on ranks [0]" in line, text
        # The uncaught ValueError on rank 1 reached rank 0 with its message.
        assert "rank 1 failed: ValueError: boom on rank 1" in out.stdout, text
        assert "stall: " in out.stderr  # the warning came first (check time 1 s)
    hvd.barrier()
