"""kolo's framework-free collectives on NumPy arrays, against Horovod's
semantics as horovod's test_torch.py checks them for torch tensors: every
op, the dtypes Horovod allows for it, 1-3 dimensions, scale factors,
grouped and async forms, process sets, and the errors (on every rank).
Expected values are computed from every rank's contribution, which each
rank can compute (conftest.contribution)."""
import array
import sys

import numpy as np
import pytest

import kolo
from conftest import ALL_TYPES, FLOAT_TYPES, INT_TYPES, NUMERIC_TYPES, contribution

DIMS = [(17,), (5, 7), (3, 4, 2)]
RTOL = {np.float16: 1e-3, np.float32: 1e-6, np.float64: 1e-12}  # for divisions


def everyone(dtype, shape, low=0, high=10):
    return [contribution(r, dtype, shape, low, high) for r in range(kolo.size())]


def tname(dtype):
    return np.dtype(dtype).name


# ---- allreduce --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", NUMERIC_TYPES, ids=tname)
@pytest.mark.parametrize("shape", DIMS, ids=str)
def test_allreduce_sum(dtype, shape, rank):
    parts = everyone(dtype, shape)
    out = kolo.allreduce(parts[rank], op=kolo.Sum, name="sum.%s.%s" % (tname(dtype), shape))
    assert out.dtype == np.dtype(dtype) and out.shape == shape
    np.testing.assert_array_equal(out, np.sum(parts, axis=0, dtype=np.float64).astype(dtype))


@pytest.mark.parametrize("dtype", NUMERIC_TYPES, ids=tname)
def test_allreduce_average_is_the_default(dtype, rank, size):
    # horovod.torch: op defaults to Average; integers are truncated.
    parts = everyone(dtype, (6, 3))
    out = kolo.allreduce(parts[rank])
    total = np.sum(parts, axis=0, dtype=np.float64)
    expected = total / size if dtype in FLOAT_TYPES else np.trunc(total / size)
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=RTOL.get(dtype, 0))


@pytest.mark.parametrize("dtype", NUMERIC_TYPES, ids=tname)
def test_allreduce_average_flag(dtype, rank, size):
    parts = everyone(dtype, (4,))
    with pytest.warns(DeprecationWarning):
        summed = kolo.allreduce(parts[rank], average=False)
    np.testing.assert_array_equal(summed, np.sum(parts, axis=0, dtype=np.float64).astype(dtype))


@pytest.mark.parametrize("op,reduce", [(kolo.Min, np.min), (kolo.Max, np.max)],
                         ids=["min", "max"])
@pytest.mark.parametrize("dtype", NUMERIC_TYPES, ids=tname)
@pytest.mark.parametrize("shape", DIMS, ids=str)
def test_allreduce_min_max(op, reduce, dtype, shape, rank):
    parts = everyone(dtype, shape)
    out = kolo.allreduce(parts[rank], op=op)
    np.testing.assert_array_equal(out, reduce(np.stack(parts), axis=0))


@pytest.mark.parametrize("dtype", NUMERIC_TYPES, ids=tname)
def test_allreduce_product(dtype, rank):
    parts = everyone(dtype, (5, 5), low=1, high=3)
    out = kolo.allreduce(parts[rank], op=kolo.Product)
    np.testing.assert_array_equal(out, np.prod(np.stack(parts).astype(np.float64),
                                               axis=0).astype(dtype))


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=tname)
def test_allreduce_prescale_postscale(dtype, rank, size):
    parts = everyone(dtype, (8,))
    out = kolo.allreduce(parts[rank], op=kolo.Sum, prescale_factor=0.5, postscale_factor=3.0)
    expected = np.sum(parts, axis=0, dtype=np.float64) * 0.5 * 3.0
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=1e-3)
    avg = kolo.allreduce(parts[rank], op=kolo.Average, postscale_factor=2.0)
    np.testing.assert_allclose(avg.astype(np.float64),
                               np.sum(parts, axis=0, dtype=np.float64) / size * 2.0, rtol=1e-3)


@pytest.mark.parametrize("dtype", [np.int32, np.int64], ids=tname)
def test_allreduce_integer_scale(dtype, rank):
    parts = everyone(dtype, (8,))
    out = kolo.allreduce(parts[rank], op=kolo.Sum, prescale_factor=2)
    np.testing.assert_array_equal(out, 2 * np.sum(parts, axis=0).astype(dtype))


def test_allreduce_async_and_poll(rank):
    parts = everyone(np.float32, (100,))
    handles = [kolo.allreduce_async(parts[rank], op=kolo.Sum, name="async.%d" % i)
               for i in range(4)]
    outs = [kolo.synchronize(h) for h in handles]
    for h in handles:
        assert kolo.poll(h)
    for out in outs:
        np.testing.assert_array_equal(out, np.sum(parts, axis=0))


def test_allreduce_leaves_its_input_alone(rank):
    mine = contribution(rank, np.float64, (6,))
    before = mine.copy()
    out = kolo.allreduce(mine, op=kolo.Sum)
    np.testing.assert_array_equal(mine, before)
    assert not np.shares_memory(out, mine)


def test_allreduce_scalar_array(rank, size):
    out = kolo.allreduce(np.array(rank + 1, dtype=np.int64), op=kolo.Sum)
    assert out.shape == () and int(out) == size * (size + 1) // 2


def test_allreduce_empty(rank):
    out = kolo.allreduce(np.zeros((0, 3), np.float32), op=kolo.Sum)
    assert out.shape == (0, 3)


@pytest.mark.parametrize("dtype", NUMERIC_TYPES, ids=tname)
def test_grouped_allreduce(dtype, rank):
    shapes = [(3,), (2, 5), (4, 1, 2)]
    parts = [everyone(dtype, s) for s in shapes]
    outs = kolo.grouped_allreduce([p[rank] for p in parts], op=kolo.Sum)
    assert len(outs) == len(shapes)
    for out, p in zip(outs, parts):
        np.testing.assert_array_equal(out, np.sum(p, axis=0, dtype=np.float64).astype(dtype))
    h = kolo.grouped_allreduce_async([p[rank] for p in parts], op=kolo.Max)
    for out, p in zip(kolo.synchronize(h), parts):
        np.testing.assert_array_equal(out, np.max(np.stack(p), axis=0))


def test_adasum_of_equal_arrays_is_the_array(rank):
    # Adasum of identical vectors is that vector (Maleki et al.).
    mine = np.linspace(1.0, 2.0, 16)
    np.testing.assert_allclose(kolo.allreduce(mine, op=kolo.Adasum), mine, rtol=1e-12)


# ---- allgather ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=tname)
@pytest.mark.parametrize("shape", DIMS, ids=str)
def test_allgather(dtype, shape, rank, size):
    parts = everyone(dtype, shape)
    out = kolo.allgather(parts[rank])
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, np.concatenate(parts))


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=tname)
def test_allgather_variable_size(dtype, rank, size):
    # horovod's test_horovod_allgather_variable_size: rank r sends r+1 rows
    # (a rank may send none).
    parts = [contribution(r, dtype, (r, 2, 3)) for r in range(size)]
    out = kolo.allgather(parts[rank])
    assert out.shape == (sum(range(size)), 2, 3)
    np.testing.assert_array_equal(out, np.concatenate(parts))


def test_grouped_allgather(rank, size):
    a = [contribution(r, np.int32, (r + 1,)) for r in range(size)]
    b = [contribution(r, np.float64, (2, 2)) for r in range(size)]
    outs = kolo.grouped_allgather([a[rank], b[rank]])
    np.testing.assert_array_equal(outs[0], np.concatenate(a))
    np.testing.assert_array_equal(outs[1], np.concatenate(b))


# ---- broadcast ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=tname)
@pytest.mark.parametrize("shape", DIMS, ids=str)
def test_broadcast(dtype, shape, rank, size):
    parts = everyone(dtype, shape)
    for root in range(size):
        out = kolo.broadcast(parts[rank], root_rank=root)
        np.testing.assert_array_equal(out, parts[root])
        assert out.dtype == np.dtype(dtype)


def test_broadcast_async(rank, size):
    handles = [kolo.broadcast_async(np.full(3, rank, np.int64), root) for root in range(size)]
    for root, h in enumerate(handles):
        np.testing.assert_array_equal(kolo.synchronize(h), np.full(3, root))


# ---- alltoall -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=tname)
def test_alltoall_with_splits(dtype, rank, size):
    # Rank r sends j+1 rows to rank j; rank r receives r+1 rows from each.
    rows = [contribution(r, dtype, (sum(range(1, size + 1)), 2)) for r in range(size)]
    splits = [j + 1 for j in range(size)]
    out, received = kolo.alltoall(rows[rank], splits=splits)
    assert received.dtype == np.int32
    np.testing.assert_array_equal(received, [rank + 1] * size)
    start = sum(range(1, rank + 1))
    expected = np.concatenate([rows[j][start:start + rank + 1] for j in range(size)])
    np.testing.assert_array_equal(out, expected)


def test_alltoall_even(rank, size):
    mine = np.arange(size * 2, dtype=np.float32) + 100 * rank
    out = kolo.alltoall(mine)
    expected = np.concatenate([np.arange(2 * rank, 2 * rank + 2) + 100 * j
                               for j in range(size)]).astype(np.float32)
    np.testing.assert_array_equal(out, expected)


def test_alltoall_splits_as_array(rank, size):
    mine = np.arange(size, dtype=np.int64)
    out, received = kolo.alltoall(mine, splits=np.ones(size, dtype=np.int32))
    np.testing.assert_array_equal(out, [rank] * size)


# ---- reducescatter ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", NUMERIC_TYPES, ids=tname)
def test_reducescatter_sum(dtype, rank, size):
    parts = everyone(dtype, (size * 4, 3))
    out = kolo.reducescatter(parts[rank], op=kolo.Sum)
    total = np.sum(parts, axis=0, dtype=np.float64).astype(dtype)
    np.testing.assert_array_equal(out, total[4 * rank:4 * rank + 4])


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=tname)
def test_reducescatter_average_is_the_default(dtype, rank, size):
    parts = everyone(dtype, (size * 2,))
    out = kolo.reducescatter(parts[rank])
    total = np.sum(parts, axis=0, dtype=np.float64) / size
    np.testing.assert_allclose(out.astype(np.float64), total[2 * rank:2 * rank + 2], rtol=1e-3)


def test_reducescatter_uneven(rank, size):
    # horovod: the first shape[0] % size ranks get one row more.
    n = size * 2 + 1
    parts = everyone(np.int64, (n, 2))
    out = kolo.reducescatter(parts[rank], op=kolo.Sum)
    counts = [n // size + (1 if r < n % size else 0) for r in range(size)]
    start = sum(counts[:rank])
    np.testing.assert_array_equal(out, np.sum(parts, axis=0)[start:start + counts[rank]])


def test_grouped_reducescatter(rank, size):
    a = everyone(np.float32, (size, 2))
    b = everyone(np.int32, (size * 3,))
    outs = kolo.grouped_reducescatter([a[rank], b[rank]], op=kolo.Sum)
    np.testing.assert_array_equal(outs[0], np.sum(a, axis=0)[rank:rank + 1])
    np.testing.assert_array_equal(outs[1], np.sum(b, axis=0)[3 * rank:3 * rank + 3])


# ---- objects, barrier, join ------------------------------------------------------


def test_broadcast_object(rank, size):
    for root in range(size):
        got = kolo.broadcast_object({"from": rank, "payload": list(range(rank))}, root_rank=root)
        assert got == {"from": root, "payload": list(range(root))}


def test_allgather_object(rank, size):
    got = kolo.allgather_object(("rank", rank, "x" * rank))
    assert got == [("rank", r, "x" * r) for r in range(size)]


def test_barrier():
    kolo.barrier()


def test_join(rank, size):
    # Ranks that joined contribute zeros to the sums of those still running.
    if rank == 0:
        out = kolo.allreduce(np.ones(4, np.float32), op=kolo.Sum, name="join.extra")
        np.testing.assert_array_equal(out, np.ones(4))
    last = kolo.join()
    assert last == 0


# ---- inputs other than NumPy arrays ------------------------------------------------


class DLPackOnly:
    """An array that offers nothing but DLPack (as another framework's)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class OnDevice(DLPackOnly):
    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA


def test_dlpack_input(rank, size):
    out = kolo.allreduce(DLPackOnly(np.full(5, rank, np.float32)), op=kolo.Sum)
    np.testing.assert_array_equal(out, np.full(5, sum(range(size))))
    assert isinstance(out, np.ndarray)


def test_device_memory_is_refused_clearly():
    with pytest.raises(ValueError, match="device memory.*copy it to the CPU"):
        kolo.allreduce(OnDevice(np.zeros(2, np.float32)))


def test_buffer_protocol_input(rank, size):
    out = kolo.allreduce(array.array("d", [rank, 2 * rank]), op=kolo.Sum)
    total = sum(range(size))
    np.testing.assert_array_equal(out, [total, 2 * total])
    got = kolo.broadcast(bytearray(b"abc") if rank == 0 else bytearray(b"xyz"), root_rank=0)
    assert got.dtype == np.uint8 and got.tobytes() == b"abc"


def test_non_contiguous_input_is_copied(rank, size):
    base = np.arange(24, dtype=np.float64).reshape(4, 6) * (rank + 1)
    view = base[:, ::2]
    assert not view.flags.c_contiguous
    out = kolo.allreduce(view, op=kolo.Sum)
    np.testing.assert_array_equal(out, np.arange(24.0).reshape(4, 6)[:, ::2]
                                  * sum(range(1, size + 1)))


def test_foreign_byte_order_is_converted(rank, size):
    mine = np.array([rank, 1], dtype=">i4")
    out = kolo.allreduce(mine, op=kolo.Sum)
    np.testing.assert_array_equal(out, [sum(range(size)), size])


# ---- errors (every rank raises) -----------------------------------------------------


@pytest.mark.parametrize("dtype", [np.complex64, np.uint32, np.uint64, np.uint16],
                         ids=tname)
def test_unsupported_dtype(dtype):
    with pytest.raises(kolo.KoloInvalidArgumentError, match="unsupported dtype %s"
                       % np.dtype(dtype).name):
        kolo.allreduce(np.zeros(3, dtype))


def test_not_an_array():
    with pytest.raises(ValueError, match=r"kolo.allreduce: tensor must be an array.*numpy"):
        kolo.allreduce([1.0, 2.0])
    with pytest.raises(ValueError, match="tensors must be a list of arrays.*wrap it"):
        kolo.grouped_allreduce(np.zeros(2))
    with pytest.raises(kolo.KoloInvalidArgumentError, match="no arrays"):
        kolo.grouped_allreduce([])


def test_bad_op_and_scale():
    with pytest.raises(ValueError, match="op must be one of kolo.Average"):
        kolo.allreduce(np.zeros(2), op="sum")
    with pytest.raises(ValueError, match="either op= or the deprecated average="):
        kolo.allreduce(np.zeros(2), op=kolo.Sum, average=True)
    with pytest.raises(ValueError, match="prescale_factor must be a number"):
        kolo.allreduce(np.zeros(2), prescale_factor="x")
    with pytest.raises(ValueError, match="root_rank must be an int rank"):
        kolo.broadcast(np.zeros(2), root_rank=1.5)


def test_adasum_of_integers_is_refused():
    with pytest.raises(kolo.KoloInvalidArgumentError, match="(?i)adasum"):
        kolo.allreduce(np.zeros(4, np.int32), op=kolo.Adasum)


def test_ranks_that_disagree_on_dtype(rank):
    dtype = np.float32 if rank == 0 else np.float64
    with pytest.raises(kolo.KoloMismatchError):
        kolo.allreduce(np.zeros(3, dtype), name="mismatch.dtype")


def test_ranks_that_disagree_on_shape(rank):
    with pytest.raises(kolo.KoloMismatchError):
        kolo.allreduce(np.zeros(3 + rank, np.float32), name="mismatch.shape")


def test_broadcast_root_out_of_range(size):
    with pytest.raises(kolo.KoloInvalidArgumentError):
        kolo.broadcast(np.zeros(2), root_rank=size + 5)


def test_alltoall_bad_splits(size):
    with pytest.raises(ValueError, match="splits must hold integers"):
        kolo.alltoall(np.zeros(size), splits=np.ones(size, np.float32))
    with pytest.raises(ValueError, match=r"splits\[0\] = -1 is negative"):
        kolo.alltoall(np.zeros(size), splits=[-1] + [1] * (size - 1))


# ---- process sets --------------------------------------------------------------------


def test_process_sets(rank, size):
    # horovod's test_horovod_*_process_sets: the even ranks and the odd ones.
    evens = kolo.add_process_set([r for r in range(size) if r % 2 == 0])
    odds = kolo.add_process_set([r for r in range(size) if r % 2 == 1])
    try:
        mine = evens if rank % 2 == 0 else odds
        members = mine.ranks
        parts = everyone(np.float64, (4, 2))
        out = kolo.allreduce(parts[rank], op=kolo.Sum, process_set=mine)
        np.testing.assert_array_equal(out, np.sum([parts[r] for r in members], axis=0))
        gathered = kolo.allgather(parts[rank], process_set=mine)
        np.testing.assert_array_equal(gathered, np.concatenate([parts[r] for r in members]))
        got = kolo.broadcast(parts[rank], root_rank=members[-1], process_set=mine)
        np.testing.assert_array_equal(got, parts[members[-1]])
        assert kolo.allgather_object(rank, process_set=mine) == members
        assert kolo.broadcast_object(rank, root_rank=members[0], process_set=mine) == members[0]
        kolo.barrier(process_set=mine)
        # A rank outside the set cannot take part.
        other = odds if mine is evens else evens
        if other.ranks:
            with pytest.raises(kolo.KoloInvalidArgumentError):
                kolo.allreduce(np.zeros(2), process_set=other)
    finally:
        kolo.remove_process_set(odds)
        kolo.remove_process_set(evens)


def test_process_sets_are_shared_with_kolo_torch_names():
    import kolo.common.process_sets as ps
    assert kolo.ProcessSet is ps.ProcessSet and kolo.global_process_set.ranks == list(
        range(kolo.size()))


def test_no_framework_was_imported():
    assert "torch" not in sys.modules, "import kolo (or the array API) imported torch"
