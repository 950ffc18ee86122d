"""Every rank runs this suite (kolorun -np N python -m pytest): the tests and
their collectives run in the same order everywhere. One engine per process,
started here; KOLO_TIMEOUT bounds any collective a single rank reaches alone.
"""
import os

import pytest
import torch

import kolo.torch as hvd

torch.set_num_threads(1)
hvd.init()

# float types first: the ones Average and scale factors accept.
FLOAT_TYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INT_TYPES = [torch.int32, torch.int64, torch.int8, torch.uint8, torch.int16]
ALL_TYPES = FLOAT_TYPES + INT_TYPES + [torch.bool]
SHAPES = [(), (5,), (3, 4), (2, 3, 2)]


def contribution(rank, dtype, shape=(3, 4)):
    """Rank rank's tensor: small integers, exact in every dtype."""
    n = 1
    for d in shape:
        n *= d
    base = (torch.arange(n, dtype=torch.int64) * 7 + rank * 3) % 11
    base = base.reshape(shape)
    if dtype == torch.bool:
        return (base % 2).to(torch.bool)
    return base.to(dtype)


def tname(dtype):
    return str(dtype).replace("torch.", "")


def pytest_sessionfinish(session, exitstatus):
    hvd.shutdown()


@pytest.fixture
def rank():
    return hvd.rank()


@pytest.fixture
def size():
    return hvd.size()


def same_on_all_ranks(tensor, name):
    """True when tensor is bitwise equal on every rank."""
    flat = tensor.detach().reshape(-1).to(torch.float64)
    lo = hvd.allreduce(flat, op=hvd.Min, name=name + ".min")
    hi = hvd.allreduce(flat, op=hvd.Max, name=name + ".max")
    return bool(torch.equal(lo, hi)) and bool(torch.equal(lo, flat))


KOLORUN = os.environ.get("KOLO_TEST_KOLORUN", "")

# What kolorun sets for torch.distributed's env:// (as torchrun does); a
# child process that must start outside the job drops these too.
TORCH_LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                          "MASTER_ADDR", "MASTER_PORT")
