"""Every collective x dtype x dims against references computed locally from
every rank's (deterministic) contribution."""
import pytest
import torch

import kolo.torch as hvd
from conftest import ALL_TYPES, FLOAT_TYPES, INT_TYPES, SHAPES, contribution, tname


def all_contributions(dtype, shape):
    return [contribution(r, dtype, shape) for r in range(hvd.size())]


def test_identity():
    assert hvd.is_initialized()
    assert 0 <= hvd.rank() < hvd.size()
    assert 0 <= hvd.local_rank() < hvd.local_size()
    assert hvd.cross_size() >= 1 and 0 <= hvd.cross_rank() < hvd.cross_size()
    assert hvd.is_homogeneous()
    ranks = hvd.allgather(torch.tensor([hvd.rank()]), name="identity.ranks")
    assert ranks.tolist() == list(range(hvd.size()))


def test_build_queries():
    assert hvd.gloo_built() is True
    assert isinstance(hvd.mpi_built(), bool)
    # Like Horovod: the NCCL version (e.g. 22809), 0 without NCCL.
    assert isinstance(hvd.nccl_built(), int) and not isinstance(hvd.nccl_built(), bool)
    assert isinstance(hvd.cuda_built(), bool)
    assert hvd.rocm_built() is False
    assert hvd.gloo_enabled() != hvd.mpi_enabled()
    assert isinstance(hvd.__version__, str)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ALL_TYPES, ids=tname)
def test_allreduce_sum_min_max(dtype, shape):
    parts = all_contributions(dtype, shape)
    wide = [p.to(torch.int64) for p in parts]
    mine = parts[hvd.rank()]
    got = hvd.allreduce(mine, op=hvd.Sum, name="ar.sum.%s.%d" % (tname(dtype), len(shape)))
    assert got.dtype == dtype and got.shape == mine.shape
    if dtype == torch.bool:
        expect = torch.stack(parts).any(0)
        assert torch.equal(got, expect)
    else:
        assert torch.equal(got.to(torch.int64), torch.stack(wide).sum(0))
    mn = hvd.allreduce(mine, op=hvd.Min, name="ar.min.%s.%d" % (tname(dtype), len(shape)))
    mx = hvd.allreduce(mine, op=hvd.Max, name="ar.max.%s.%d" % (tname(dtype), len(shape)))
    if dtype == torch.bool:
        assert torch.equal(mn, torch.stack(parts).all(0))
        assert torch.equal(mx, torch.stack(parts).any(0))
    else:
        assert torch.equal(mn.to(torch.int64), torch.stack(wide).min(0).values)
        assert torch.equal(mx.to(torch.int64), torch.stack(wide).max(0).values)
    # The input is untouched.
    assert torch.equal(mine, contribution(hvd.rank(), dtype, shape))


@pytest.mark.parametrize("dtype", INT_TYPES[:2] + FLOAT_TYPES[:2], ids=tname)
def test_allreduce_product(dtype):
    parts = [torch.tensor([r + 1, 2, -1 if dtype != torch.uint8 else 1]).to(dtype)
             for r in range(hvd.size())]
    got = hvd.allreduce(parts[hvd.rank()], op=hvd.Product, name="ar.prod." + tname(dtype))
    assert torch.equal(got, torch.stack(parts).prod(0).to(dtype))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=tname)
def test_allreduce_average_and_scales(dtype, shape):
    n = hvd.size()
    parts = all_contributions(dtype, shape)
    mine = parts[hvd.rank()]
    ref = torch.stack([p.double() for p in parts]).sum(0)
    avg = hvd.allreduce(mine, name="ar.avg.%s.%d" % (tname(dtype), len(shape)))  # default op
    tol = dict(rtol=1e-2, atol=1e-2) if dtype in (torch.float16, torch.bfloat16) else {}
    torch.testing.assert_close(avg.double(), ref / n, **tol)
    scaled = hvd.allreduce(mine, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0,
                           name="ar.scaled.%s.%d" % (tname(dtype), len(shape)))
    torch.testing.assert_close(scaled.double(), ref * 2.0, **tol)


def test_allreduce_legacy_average_flag():
    n = hvd.size()
    t = torch.full((3,), float(hvd.rank() + 1))
    with pytest.warns(DeprecationWarning):
        avg = hvd.allreduce(t, average=True, name="legacy.avg")
    with pytest.warns(DeprecationWarning):
        total = hvd.allreduce(t, average=False, name="legacy.sum")
    assert torch.allclose(avg, torch.full((3,), (n + 1) / 2))
    assert torch.allclose(total, torch.full((3,), n * (n + 1) / 2))


def test_allreduce_in_place_variants():
    n = hvd.size()
    t = torch.full((3, 4), float(hvd.rank() + 1))
    out = hvd.allreduce_(t, op=hvd.Sum, name="inplace.ar")
    assert out is t
    assert torch.equal(t, torch.full((3, 4), n * (n + 1) / 2))
    # Non-contiguous: reduced in a copy and written back.
    storage = torch.arange(12.0).reshape(3, 4) * (hvd.rank() + 1)
    view = storage.t()
    assert not view.is_contiguous()
    hvd.allreduce_(view, op=hvd.Sum, name="inplace.noncontig")
    assert torch.equal(storage, torch.arange(12.0).reshape(3, 4) * (n * (n + 1) / 2))
    h = hvd.allreduce_async_(t, op=hvd.Average, name="inplace.async")
    assert hvd.synchronize(h) is t
    assert torch.equal(t, torch.full((3, 4), n * (n + 1) / 2))


def test_async_and_poll_with_generated_names():
    n = hvd.size()
    handles = [hvd.allreduce_async(torch.full((100,), float(i + hvd.rank())), op=hvd.Sum)
               for i in range(10)]
    for i, h in enumerate(handles):
        out = hvd.synchronize(h)
        assert hvd.poll(h)
        assert torch.equal(out, torch.full((100,), float(n * i + n * (n - 1) / 2)))
        assert hvd.synchronize(h) is out  # a second wait returns the same result
    # poll() turns true without waiting.
    h = hvd.allreduce_async(torch.ones(4), name="poll.me")
    import time
    deadline = time.time() + 20
    while not hvd.poll(h):
        assert time.time() < deadline
        time.sleep(0.001)
    assert torch.equal(h.wait(), torch.ones(4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=tname)
def test_grouped_allreduce(dtype):
    n = hvd.size()
    shapes = [(3,), (2, 2), ()]
    mine = [contribution(hvd.rank(), dtype, s) for s in shapes]
    outs = hvd.grouped_allreduce(mine, op=hvd.Sum, name="grouped." + tname(dtype))
    for s, out in zip(shapes, outs):
        expect = torch.stack([contribution(r, torch.int64, s) for r in range(n)]).sum(0)
        assert out.dtype == dtype and torch.equal(out.to(torch.int64), expect)
    h = hvd.grouped_allreduce_async(mine, op=hvd.Max, name="grouped.async." + tname(dtype))
    outs = hvd.synchronize(h)
    assert isinstance(outs, list) and len(outs) == 3
    copies = [m.clone() for m in mine]
    res = hvd.grouped_allreduce_(copies, op=hvd.Sum, name="grouped.inplace." + tname(dtype))
    for c, r in zip(copies, res):
        assert c is r
    assert torch.equal(copies[0].to(torch.int64),
                       torch.stack([contribution(r, torch.int64, (3,)) for r in range(n)]).sum(0))


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("dtype", ALL_TYPES, ids=tname)
def test_allgather_variable_first_dim(dtype, dims):
    n = hvd.size()
    rest = (2, 3)[:dims - 1]
    parts = [contribution(r, dtype, (r + 1,) + rest) for r in range(n)]
    got = hvd.allgather(parts[hvd.rank()], name="ag.%s.%d" % (tname(dtype), dims))
    assert got.dtype == dtype
    assert torch.equal(got, torch.cat(parts, 0))
    h = hvd.allgather_async(parts[hvd.rank()], name="ag.async.%s.%d" % (tname(dtype), dims))
    assert torch.equal(hvd.synchronize(h), torch.cat(parts, 0))


def test_allgather_zero_rows_on_some_ranks():
    n = hvd.size()
    rows = hvd.rank() % 2
    t = torch.full((rows, 2), float(hvd.rank()))
    got = hvd.allgather(t, name="ag.zero")
    assert got.shape == (sum(r % 2 for r in range(n)), 2)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ALL_TYPES, ids=tname)
def test_broadcast_from_every_root(dtype, shape):
    for root in range(hvd.size()):
        mine = contribution(hvd.rank(), dtype, shape)
        got = hvd.broadcast(mine, root, name="bc.%s.%d.%d" % (tname(dtype), len(shape), root))
        assert torch.equal(got, contribution(root, dtype, shape))
        assert torch.equal(mine, contribution(hvd.rank(), dtype, shape))
        out = hvd.broadcast_(mine, root_rank=root,
                             name="bc_.%s.%d.%d" % (tname(dtype), len(shape), root))
        assert out is mine and torch.equal(mine, contribution(root, dtype, shape))


def test_broadcast_async_variants():
    t = torch.full((4,), float(hvd.rank()))
    h1 = hvd.broadcast_async(t, 0, name="bc.async")
    h2 = hvd.broadcast_async_(t.clone(), 0, name="bc.async_")
    assert torch.equal(hvd.synchronize(h1), torch.zeros(4))
    assert torch.equal(hvd.synchronize(h2), torch.zeros(4))
    # broadcast_ on a leaf that requires grad (as parameters are).
    p = torch.nn.Parameter(torch.full((2,), float(hvd.rank())))
    hvd.broadcast_(p.data, 0, name="bc.param")
    assert torch.equal(p.detach(), torch.zeros(2))


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("dtype", ALL_TYPES, ids=tname)
def test_alltoall_with_splits(dtype, dims):
    n, r = hvd.size(), hvd.rank()
    rest = (2, 2)[:dims - 1]

    def block(src, dst):  # rows src sends to dst: dst + 1 of them
        return contribution(10 * src + dst, dtype, (dst + 1,) + rest)

    sent = torch.cat([block(r, j) for j in range(n)], 0)
    splits = [j + 1 for j in range(n)]
    out, received = hvd.alltoall(sent, splits=splits, name="a2a.%s.%d" % (tname(dtype), dims))
    assert torch.equal(out, torch.cat([block(s, r) for s in range(n)], 0))
    assert received.tolist() == [r + 1] * n
    # splits as a tensor; the async handle returns (tensor, received_splits).
    h = hvd.alltoall_async(sent, splits=torch.tensor(splits),
                           name="a2a.async.%s.%d" % (tname(dtype), dims))
    out2, received2 = hvd.synchronize(h)
    assert torch.equal(out2, out) and torch.equal(received2, received)


def test_alltoall_even_split_returns_tensor_only():
    n = hvd.size()
    t = torch.arange(n) + 100 * hvd.rank()
    got = hvd.alltoall(t, name="a2a.even")
    assert isinstance(got, torch.Tensor)
    assert torch.equal(got, torch.arange(n) * 100 + hvd.rank())


def _share(rows, n, r):
    base, extra = divmod(rows, n)
    begin = r * base + min(r, extra)
    return begin, base + (1 if r < extra else 0)


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("dtype", FLOAT_TYPES + INT_TYPES, ids=tname)
def test_reducescatter(dtype, dims):
    n, r = hvd.size(), hvd.rank()
    rows = 2 * n + 1  # uneven: the first ranks take one more row
    shape = (rows,) + (2, 3)[:dims - 1]
    parts = all_contributions(dtype, shape)
    got = hvd.reducescatter(parts[r], op=hvd.Sum, name="rs.%s.%d" % (tname(dtype), dims))
    begin, count = _share(rows, n, r)
    expect = torch.stack([p.to(torch.int64) for p in parts]).sum(0).narrow(0, begin, count)
    assert got.dtype == dtype and torch.equal(got.to(torch.int64), expect)
    if dtype in FLOAT_TYPES:
        avg = hvd.synchronize(hvd.reducescatter_async(
            parts[r], name="rs.avg.%s.%d" % (tname(dtype), dims)))
        tol = dict(rtol=1e-2, atol=1e-2) if dtype in (torch.float16, torch.bfloat16) else {}
        torch.testing.assert_close(avg.double(), expect.double() / n, **tol)


def test_allreduce_fp16_compression():
    n = hvd.size()
    t = torch.full((8,), 0.5 * (hvd.rank() + 1), dtype=torch.float32)
    got = hvd.allreduce(t, op=hvd.Sum, compression=hvd.Compression.fp16, name="fp16.ar")
    assert got.dtype == torch.float32
    assert torch.allclose(got, torch.full((8,), 0.5 * n * (n + 1) / 2))
    ints = torch.ones(3, dtype=torch.int32)  # integers travel unchanged
    assert hvd.Compression.fp16.compress(ints)[0] is ints
    got = hvd.allreduce(t, op=hvd.Sum, compression=hvd.Compression.bf16, name="bf16.ar")
    assert got.dtype == torch.float32


def test_barrier_and_many_ranks_in_step():
    for _ in range(3):
        hvd.barrier()


def test_waiting_releases_the_gil():
    # Rank 0 submits late; meanwhile the other ranks wait in synchronize()
    # and a Python thread must keep running.
    import threading
    import time
    ticks, stop = [], threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        if hvd.rank() == 0:
            time.sleep(0.5)
        h = hvd.allreduce_async(torch.ones(1), name="gil.wait")
        before = len(ticks)
        hvd.synchronize(h)
        during = len(ticks) - before
    finally:
        stop.set()
        thread.join()
    if hvd.rank() != 0:
        assert during > 20, during
