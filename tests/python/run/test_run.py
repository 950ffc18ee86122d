"""kolo.run (horovod.run): a function on every rank of a kolorun job.

Each test starts real kolorun jobs of 2 or 3 ranks from this process. The
functions below are pickled by reference (this module is importable on the
ranks because kolo.run ships the caller's sys.path); the lambdas and
closures by value.
"""
import os
import time
import warnings

import pytest

import kolo
from kolo import runner


def train(scale, offset=0, tag="x"):
    """A small kolo.torch job: every rank contributes rank+1; returns what
    this rank saw."""
    import torch
    import kolo.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum, name="sum")
    return {"rank": hvd.rank(), "size": hvd.size(), "sum": total.item() * scale + offset,
            "tag": tag, "pid": os.getpid()}


@pytest.mark.parametrize("np_", [2, 3])
def test_results_in_rank_order_with_args_and_kwargs(np_):
    results = kolo.run(train, args=(2.0,), kwargs={"offset": 1, "tag": "t"}, num_proc=np_)
    expected_sum = np_ * (np_ + 1) / 2 * 2.0 + 1
    assert [r["rank"] for r in results] == list(range(np_))
    assert all(r["size"] == np_ and r["sum"] == expected_sum and r["tag"] == "t"
               for r in results)
    assert len({r["pid"] for r in results}) == np_
    assert all(r["pid"] != os.getpid() for r in results)


def fail_on_rank_1(pid_dir):
    """Rank 1 raises; ranks 0 and 2 wait in a collective for it."""
    import torch
    import kolo.torch as hvd
    hvd.init()
    with open(os.path.join(pid_dir, "rank%d" % hvd.rank()), "w") as f:
        f.write(str(os.getpid()))
    hvd.barrier()
    if hvd.rank() == 1:
        raise ValueError("bad batch on rank 1")
    hvd.allreduce(torch.ones(3), name="never.completes")
    return "unreachable"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has exited; its parent (kolorun) is gone too once reaped
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_raising_rank_reraises_with_its_traceback_and_the_others_end(tmp_path):
    start = time.monotonic()
    with pytest.raises(ValueError) as info:
        kolo.run(fail_on_rank_1, args=(str(tmp_path),), num_proc=3)
    elapsed = time.monotonic() - start
    assert "bad batch on rank 1" in str(info.value)
    cause = info.value.__cause__
    assert isinstance(cause, runner.RemoteTraceback)
    assert cause.rank == 1
    assert "fail_on_rank_1" in cause.text and "bad batch on rank 1" in cause.text
    assert "rank 1" in str(cause)
    # The other ranks ended well within KOLO_TIMEOUT (30 s here) plus the
    # ranks' start; none of them is left running.
    pids = [int((tmp_path / ("rank%d" % r)).read_text()) for r in range(3)]
    assert not [p for p in pids if _alive(p)]
    assert elapsed < 30 + 60, elapsed


def exit_without_raising():
    import kolo.torch as hvd
    hvd.init()
    if hvd.rank() == 1:
        os._exit(3)
    hvd.barrier()
    return hvd.rank()


def test_a_rank_that_dies_without_raising():
    with pytest.raises(RuntimeError) as info:
        kolo.run(exit_without_raising, num_proc=2)
    assert "kolorun exited with status" in str(info.value)


class _Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("this exception does not pickle")


def raise_unpicklable():
    raise _Unpicklable("not coming back as itself")


def test_an_exception_that_does_not_pickle_becomes_rank_error():
    with pytest.raises(runner.RankError) as info:
        kolo.run(raise_unpicklable, num_proc=2)
    assert "not coming back as itself" in str(info.value)
    assert info.value.rank in (0, 1)


SECRET = "0123abcd" * 8


def test_the_secret_is_on_no_command_line(monkeypatch):
    # A known secret (the real code path, with this value) to look for.
    monkeypatch.setattr(runner._job.secrets, "token_hex", lambda n: SECRET)
    secret = SECRET

    def look_for_secret():
        """What this rank can find of the job's secret: command lines of
        every process, its own environment (a closure: pickled by value)."""
        import kolo.torch as hvd
        hvd.init()
        on_command_lines = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if secret.encode() in f.read():
                        on_command_lines.append(int(pid))
            except OSError:
                pass
        environ_mode = os.stat("/proc/%d/environ" % os.getppid()).st_mode & 0o777
        return {"cmdlines": on_command_lines, "in_env": secret in str(dict(os.environ)),
                "kolorun_environ_mode": environ_mode}

    # Horovod's examples pass the deprecated np=: num_proc with a warning.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = kolo.run(look_for_secret, np=2)
    assert any(issubclass(w.category, DeprecationWarning) and "np" in str(w.message)
               for w in caught)
    assert len(results) == 2
    for r in results:
        assert r["cmdlines"] == [], r
        assert not r["in_env"], "the function's environment still holds the store secret"
        # kolorun's environment (which holds it) is readable by its owner only.
        assert r["kolorun_environ_mode"] & 0o077 == 0, oct(r["kolorun_environ_mode"])


def test_the_store_refuses_a_wrong_secret():
    from kolo import _kolo
    job = runner._job.FunctionJob(train, (1.0,), {})
    try:
        with pytest.raises(kolo.KoloError):
            _kolo.StoreClient("127.0.0.1", job.port, "not-the-secret", 2.0)
        good = _kolo.StoreClient("127.0.0.1", job.port, job.secret, 5.0)
        assert good.check(runner._job.PREFIX + "func")
        good.close()
    finally:
        job.close()


def elastic_rank():
    import kolo.torch as hvd
    hvd.init()
    return (hvd.rank(), hvd.size())


def test_elastic_arguments_run_an_elastic_job(tmp_path):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    results = kolo.run(elastic_rank, min_num_proc=2, max_num_proc=2,
                       host_discovery_script=str(script), reset_limit=1,
                       cooldown_range=(1, 2))
    assert results == [(0, 2), (1, 2)]


@pytest.mark.parametrize("kwargs, words", [
    ({"hosts": "localhost:2", "hostfile": "/dev/null"}, "hosts or hostfile"),
    ({"use_gloo": True, "use_mpi": True}, "use_gloo and use_mpi"),
    ({"slots": 2}, "elastic"),
    ({"num_proc": 0}, "num_proc"),
    ({"num_proc": 2.5}, "num_proc"),
    ({"mpi_args": "--bind-to none"}, "use_mpi"),
    ({"min_num_proc": 3, "max_num_proc": 2}, "max_num_proc"),
    ({"cooldown_range": (5, 1), "min_num_proc": 2}, "cooldown_range"),
    ({"start_timeout": "soon"}, "start_timeout"),
    ({"num_proc": 2, "np": 3}, "disagree"),
    ({"args": 5}, "args"),
    ({"kwargs": [1]}, "kwargs"),
])
def test_bad_arguments_are_value_errors_before_anything_starts(kwargs, words):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValueError) as info:
            kolo.run(train, **kwargs)
    assert words in str(info.value)


def test_func_must_be_callable():
    with pytest.raises(ValueError, match="callable"):
        kolo.run("train.py", num_proc=2)


def mpi_identity(a):
    import torch
    import kolo.torch as hvd
    hvd.init()
    return hvd.rank(), hvd.mpi_enabled(), hvd.allreduce(torch.ones(1) * a, op=hvd.Sum).item()


def test_use_mpi_runs_under_mpirun_and_disable_cache_is_a_notice(capfd):
    from kolo import _kolo
    if not _kolo.build_info()["mpi"]:
        pytest.skip("this kolo is built without MPI")
    results = kolo.run(mpi_identity, args=(3,), num_proc=2, use_mpi=True, disable_cache=True)
    assert results == [(0, True, 6.0), (1, True, 6.0)]
    assert "disable_cache: kolo caches no host checks" in capfd.readouterr().err
