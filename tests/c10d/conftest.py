"""Every rank runs this suite (kolorun -np N python -m pytest): the tests run
in the same order everywhere, so their collectives meet. The default group
is kolo's ("kolo", env:// from kolorun's environment); GLOO is a gloo group
of the same ranks in the same process, the reference every call of kolo's
is compared with.
"""
import datetime
import os

import pytest
import torch
import torch.distributed as dist

import kolo.torch  # noqa: F401  (registers the "kolo" backend)

torch.set_num_threads(1)
TIMEOUT = datetime.timedelta(seconds=float(os.environ.get("KOLO_TEST_PG_TIMEOUT", "60")))
dist.init_process_group("kolo", timeout=TIMEOUT)
GLOO = dist.new_group(backend="gloo", timeout=TIMEOUT)
KOLO = dist.group.WORLD
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def pytest_sessionfinish(session, exitstatus):
    dist.destroy_process_group()


@pytest.fixture
def rank():
    return dist.get_rank()


@pytest.fixture
def size():
    return dist.get_world_size()


def thread_names():
    """This process's threads by name (kolo names its own: "kolo-loop", ...)."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                names.append(f.read().strip())
        except OSError:
            pass  # the thread ended meanwhile
    return names


def contribution(rank, dtype, shape=(3, 4), seed=0):
    """Rank rank's tensor: small integers, exact in every dtype and under
    every reduction (products stay small)."""
    n = 1
    for d in shape:
        n *= d
    base = (torch.arange(n, dtype=torch.int64) * 7 + rank * 3 + seed) % 5 + 1
    base = base.reshape(shape)
    if dtype == torch.bool:
        return (base % 2).to(torch.bool)
    if dtype.is_complex:
        return torch.complex(base.double(), -base.double()).to(dtype)
    return base.to(dtype)


def gloo_supports(fn):
    """Runs fn on the gloo group: (True, result), or (False, why) when gloo
    refuses the call on this torch (then every rank refuses it alike)."""
    try:
        return True, fn(GLOO)
    except (RuntimeError, ValueError, NotImplementedError) as e:
        return False, str(e)
