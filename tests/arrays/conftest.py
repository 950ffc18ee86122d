"""Every rank runs this suite (kolorun -np N python -m pytest): the tests and
their collectives run in the same order everywhere. The framework-free API
only: nothing here imports torch, and a test fails if anything did.
"""
import sys

import numpy as np
import pytest

import kolo

kolo.init()

FLOAT_TYPES = [np.float16, np.float32, np.float64]
INT_TYPES = [np.int8, np.int32, np.int64, np.uint8]
NUMERIC_TYPES = FLOAT_TYPES + INT_TYPES
ALL_TYPES = NUMERIC_TYPES + [np.bool_]


def contribution(rank, dtype, shape=(3, 4), low=0, high=10):
    """Rank rank's array: small integers from a seed shared by every rank,
    so any rank can compute any other's contribution (exact in every
    dtype)."""
    rng = np.random.default_rng(1234 + rank)
    base = rng.integers(low, high, size=shape)
    if dtype == np.bool_:
        return (base % 2).astype(np.bool_)
    return base.astype(dtype)


def pytest_sessionfinish(session, exitstatus):
    kolo.shutdown()


@pytest.fixture
def rank():
    return kolo.rank()


@pytest.fixture
def size():
    return kolo.size()


def torch_was_imported():
    return "torch" in sys.modules
