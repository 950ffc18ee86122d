"""horovod.torch parity: what Horovod programs expect of dtypes, scale
factors on integers, Adasum, SyncBatchNorm, sparse gradients, compression,
optimizer-state broadcast and the public names. References are computed
here, from every rank's deterministic inputs."""
import math

import pytest
import torch

import kolo.torch as hvd
from conftest import ALL_TYPES, FLOAT_TYPES, INT_TYPES, contribution, same_on_all_ranks, tname


# ---- dtypes ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=tname)
def test_grouped_allreduce_every_dtype(dtype):
    n = hvd.size()
    shapes = [(3,), (2, 2)]
    mine = [contribution(hvd.rank(), dtype, s) for s in shapes]
    outs = hvd.grouped_allreduce(mine, op=hvd.Max, name="par.grouped." + tname(dtype))
    for s, out in zip(shapes, outs):
        want = torch.stack([contribution(r, dtype, s).to(torch.int64) for r in range(n)]).max(0)[0]
        assert out.dtype == dtype and torch.equal(out.to(torch.int64), want)


def test_int16_on_every_op():
    n, r = hvd.size(), hvd.rank()
    t = torch.arange(6, dtype=torch.int16).reshape(3, 2) * (r + 1) - 300
    summed = hvd.allreduce(t, op=hvd.Sum, name="par.i16.sum")
    want = sum(torch.arange(6, dtype=torch.int64).reshape(3, 2) * (k + 1) - 300 for k in range(n))
    assert summed.dtype == torch.int16 and torch.equal(summed.to(torch.int64), want)
    assert torch.equal(hvd.allreduce(t, name="par.i16.avg").to(torch.int64),
                       torch.div(want, n, rounding_mode="trunc"))
    gathered = hvd.allgather(t[: r + 1], name="par.i16.gather")
    assert gathered.dtype == torch.int16 and gathered.shape[0] == n * (n + 1) // 2
    assert torch.equal(hvd.broadcast(t, n - 1, name="par.i16.bcast"),
                       torch.arange(6, dtype=torch.int16).reshape(3, 2) * n - 300)
    out, splits = hvd.alltoall(torch.full((n, 2), r, dtype=torch.int16), splits=[1] * n,
                               name="par.i16.a2a")
    assert torch.equal(out[:, 0], torch.arange(n, dtype=torch.int16))
    rs = hvd.reducescatter(torch.ones(n, 2, dtype=torch.int16), op=hvd.Sum, name="par.i16.rs")
    assert torch.equal(rs, torch.full((1, 2), n, dtype=torch.int16))
    assert hvd.allreduce_(t.clone(), op=hvd.Min, name="par.i16.min").dtype == torch.int16


# ---- integer and half scale factors (Horovod: float64 for integers, float32
# math for float16 on the CPU, then cast back) ------------------------------------


def _horovod_scale(tensor, factor, dtype):
    if dtype in (torch.float16, torch.bfloat16):
        return (tensor.float() * torch.tensor(factor, dtype=torch.float32)).to(dtype)
    if dtype in FLOAT_TYPES:
        return (tensor * torch.tensor(factor, dtype=dtype)).to(dtype)
    return (tensor.double() * factor).to(dtype)


@pytest.mark.parametrize("dtype", INT_TYPES + FLOAT_TYPES, ids=tname)
def test_prescale_postscale_on_integers_and_halves(dtype):
    n, r = hvd.size(), hvd.rank()
    low = 0 if dtype == torch.uint8 else -40
    base = torch.arange(17, dtype=torch.int64) * 13 % 41 + low // 2
    x = (base + r).clamp(low, 40).to(dtype)
    parts = [(base + k).clamp(low, 40).to(dtype) for k in range(n)]
    pre, post = 0.37, 1.7
    summed = _horovod_scale(parts[0], pre, dtype)
    for p in parts[1:]:
        summed = (summed.to(torch.float64) + _horovod_scale(p, pre, dtype).to(torch.float64)).to(dtype)
    want_sum = _horovod_scale(summed, post, dtype)
    want_avg = _horovod_scale(summed, post / n, dtype)
    tol = 0 if dtype not in (torch.float16, torch.bfloat16) else 0.05
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=pre, postscale_factor=post,
                        name="par.scale.sum." + tname(dtype))
    assert got.dtype == dtype
    assert torch.allclose(got.double(), want_sum.double(), rtol=tol, atol=tol)
    got = hvd.allreduce(x, op=hvd.Average, prescale_factor=pre, postscale_factor=post,
                        name="par.scale.avg." + tname(dtype))
    assert torch.allclose(got.double(), want_avg.double(), rtol=tol, atol=tol)
    got = hvd.grouped_allreduce([x, x], op=hvd.Sum, prescale_factor=pre, postscale_factor=post,
                                name="par.scale.grouped." + tname(dtype))
    assert all(torch.allclose(g.double(), want_sum.double(), rtol=tol, atol=tol) for g in got)
    rs = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=pre, postscale_factor=post,
                           name="par.scale.rs." + tname(dtype))
    first = sum(17 // n + (k < 17 % n) for k in range(r))
    mine = want_sum[first:first + rs.shape[0]]
    # The ring reduce-scatter adds in another order than the reference.
    rs_tol = {torch.float32: 1e-5, torch.float64: 1e-12}.get(dtype, 2 * tol)
    assert torch.allclose(rs.double(), mine.double(), rtol=rs_tol, atol=rs_tol)


# ---- Adasum -------------------------------------------------------------------------


def _adasum_pair(a, b):
    dot, aa, bb = float((a * b).sum()), float((a * a).sum()), float((b * b).sum())
    tiny = math.sqrt(2.2250738585072014e-308)
    ca = 1 - dot / (2 * aa) if aa >= tiny else 1.0
    cb = 1 - dot / (2 * bb) if bb >= tiny else 1.0
    return ca * a + cb * b


def adasum_reference(vectors):
    """The tree of docs/guides/adasum.md: fold ranks p.. into 0.., then pairs."""
    v = [x.double() for x in vectors]
    n = len(v)
    p = 1
    while p * 2 <= n:
        p *= 2
    for i in range(n - p):
        v[i] = _adasum_pair(v[i], v[p + i])
    step = 1
    while step < p:
        for k in range(0, p - step, 2 * step):
            v[k] = _adasum_pair(v[k], v[k + step])
        step *= 2
    return v[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=tname)
def test_adasum_allreduce_matches_reference(dtype):
    n = hvd.size()
    gen = torch.Generator().manual_seed(7)
    sizes = [1, 5, 2 * n + 1, 257]
    all_ranks = [[torch.randn(s, generator=gen).to(dtype) for s in sizes] for _ in range(n)]
    mine = all_ranks[hvd.rank()]
    handles = [hvd.allreduce_async(t, op=hvd.Adasum, name="par.adasum.%s.%d" % (tname(dtype), i))
               for i, t in enumerate(mine)]
    tol = {torch.float16: 5e-3, torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
    for i, h in enumerate(handles):
        got = hvd.synchronize(h)
        want = adasum_reference([all_ranks[r][i] for r in range(n)])
        assert got.dtype == dtype
        assert torch.allclose(got.double(), want, rtol=tol, atol=tol * float(want.abs().max()))


def test_adasum_orthogonal_adds_parallel_averages():
    """Horovod's test_adasum_pytorch cases: orthogonal columns of a QR factor
    sum; parallel vectors average (power-of-two sizes)."""
    n, r = hvd.size(), hvd.rank()
    gen = torch.Generator().manual_seed(2)
    q, _ = torch.linalg.qr(torch.randn(4 * n + 3, n, generator=gen, dtype=torch.float64))
    got = hvd.allreduce(q[:, r].contiguous(), op=hvd.Adasum, name="par.adasum.orth")
    assert torch.allclose(got, q.sum(1), atol=1e-12)
    a = torch.randn(9, generator=gen, dtype=torch.float64)
    coeff = torch.randn(n, generator=gen, dtype=torch.float64).abs() + 0.5
    got = hvd.allreduce(a * coeff[r], op=hvd.Adasum, name="par.adasum.par")
    assert torch.allclose(got, adasum_reference([a * c for c in coeff]), atol=1e-12)
    if n & (n - 1) == 0:
        assert torch.allclose(got, a * coeff.mean(), atol=1e-12)


def test_adasum_refuses_integers_with_the_reason():
    with pytest.raises(hvd.KoloInvalidArgumentError, match="Adasum needs a floating-point"):
        hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum, name="par.adasum.int")


def test_distributed_optimizer_adasum_combines_local_updates():
    """Horovod's delta optimizer: the wrapped optimizer steps locally, the
    parameter changes are combined with Adasum."""
    n, r = hvd.size(), hvd.rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    shadow = torch.nn.Linear(4, 3)
    shadow.load_state_dict(model.state_dict())
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    shadow_opt = torch.optim.Adam(shadow.parameters(), lr=0.05)
    with pytest.raises(AssertionError, match="Adasum"):
        with opt.skip_synchronize():
            pass
    for step in range(2):
        x = torch.linspace(-1, 1, 20).reshape(5, 4) * (r + 1 + step)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        before = [p.detach().clone() for p in shadow.parameters()]
        shadow_opt.zero_grad()
        shadow(x).pow(2).mean().backward()
        shadow_opt.step()
        for k, (p, p0, got) in enumerate(zip(shadow.parameters(), before, model.parameters())):
            deltas = hvd.allgather((p.detach() - p0).unsqueeze(0).double(),
                                   name="par.adasum.opt.%d.%d" % (step, k))
            want = p0.double() + adasum_reference(list(deltas))
            assert torch.allclose(got.double(), want, atol=1e-6), (step, k)
            with torch.no_grad():
                p.copy_(got)
    assert same_on_all_ranks(model.weight, "par.adasum.opt.same")


class _DoublingCompressor:
    """A custom compressor (Horovod's Compressor interface): sends twice the
    tensor, brings back half. Adasum is homogeneous (Adasum(2a, 2b) =
    2 Adasum(a, b)), so the step must equal the uncompressed one."""
    calls = []

    @staticmethod
    def compress(tensor):
        _DoublingCompressor.calls.append("compress")
        return tensor * 2, ("ctx", tensor.dtype)

    @staticmethod
    def decompress(tensor, ctx):
        assert ctx[0] == "ctx"
        _DoublingCompressor.calls.append("decompress")
        return (tensor / 2).to(ctx[1])


class _IntegerCompressor:
    """Sends int32, which Adasum refuses: every rank's reduction fails."""

    @staticmethod
    def compress(tensor):
        return tensor.to(torch.int32), None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def _adasum_model_and_optimizer(compression, name_prefix):
    torch.manual_seed(1)
    model = torch.nn.Linear(4, 3)
    named = [(name_prefix + n, p) for n, p in model.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=named, op=hvd.Adasum,
                                   compression=compression)
    return model, opt


def _adasum_step(model, opt):
    x = torch.linspace(-1, 1, 20).reshape(5, 4) * (hvd.rank() + 1)
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()


def test_distributed_optimizer_adasum_takes_a_custom_compressor():
    """The delta step calls a custom compressor's compress and decompress
    once per parameter and step, with its context, and gives the
    uncompressed step's parameters."""
    plain, plain_opt = _adasum_model_and_optimizer(hvd.Compression.none, "plain.")
    custom, custom_opt = _adasum_model_and_optimizer(_DoublingCompressor, "custom.")
    _DoublingCompressor.calls.clear()
    _adasum_step(plain, plain_opt)
    _adasum_step(custom, custom_opt)
    params = len(list(custom.parameters()))
    assert _DoublingCompressor.calls == ["compress"] * params + ["decompress"] * params
    for a, b in zip(plain.parameters(), custom.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
    assert same_on_all_ranks(custom.weight, "par.adasum.custom.same")


def test_distributed_optimizer_adasum_failed_reduction_restores_the_parameters():
    """A reduction that fails (an int32 change, which Adasum refuses) raises
    the engine's error on every rank and leaves each parameter as it was
    before the step; the optimizer can step again."""
    model, opt = _adasum_model_and_optimizer(_IntegerCompressor, "bad.")
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(hvd.KoloInvalidArgumentError, match="Adasum needs a floating-point"):
        _adasum_step(model, opt)
    for p, p0 in zip(model.parameters(), before):
        assert torch.equal(p, p0)
    opt.zero_grad()  # nothing was left in flight


# ---- SyncBatchNorm ------------------------------------------------------------------------


def _rows(first, count, c, length):
    idx = torch.arange(first * c * length, (first + count) * c * length, dtype=torch.float64)
    return ((idx * 0.37).sin() * 3 + (idx % 5) * 0.1).reshape(count, c, length).float()


@pytest.mark.parametrize("momentum", [0.3, None], ids=["momentum", "cumulative"])
def test_sync_batch_norm_equals_one_process_on_the_whole_batch(momentum):
    """N ranks with batches of different sizes (rank 1 has none) against
    torch.nn.BatchNorm1d on the concatenated batch: forward, input and
    parameter gradients, running statistics, then eval mode."""
    n, r = hvd.size(), hvd.rank()
    rows = [2 + k if k != 1 else 0 for k in range(n)]
    total, first = sum(rows), sum(rows[:r])
    c, length = 3, 4
    ref = torch.nn.BatchNorm1d(c, momentum=momentum)
    sync = hvd.SyncBatchNorm(c, momentum=momentum)
    with torch.no_grad():
        ref.weight.copy_(torch.linspace(0.5, 2.0, c))
        ref.bias.copy_(torch.linspace(-1.0, 1.0, c))
    sync.load_state_dict(ref.state_dict())
    for step in range(2):
        full = (_rows(0, total, c, length) * (step + 1)).requires_grad_()
        probe = torch.arange(full.numel(), dtype=torch.float32).reshape(full.shape).cos()
        want = ref(full)
        (want * probe).sum().backward()
        mine = (_rows(first, rows[r], c, length) * (step + 1)).requires_grad_()
        got = sync(mine)
        (got * probe[first:first + rows[r]]).sum().backward()
        assert torch.allclose(got, want[first:first + rows[r]], atol=1e-5)
        assert torch.allclose(mine.grad, full.grad[first:first + rows[r]], atol=1e-5)
        wgrad = hvd.allreduce(sync.weight.grad, op=hvd.Sum, name="par.sbn.w.%d" % step)
        bgrad = hvd.allreduce(sync.bias.grad, op=hvd.Sum, name="par.sbn.b.%d" % step)
        assert torch.allclose(wgrad, ref.weight.grad, atol=1e-4)
        assert torch.allclose(bgrad, ref.bias.grad, atol=1e-4)
        assert torch.allclose(sync.running_mean, ref.running_mean, atol=1e-6)
        assert torch.allclose(sync.running_var, ref.running_var, atol=1e-5)
        assert int(sync.num_batches_tracked) == step + 1
        for m in (ref, sync):
            m.zero_grad()
    ref.eval()
    sync.eval()
    x = _rows(5 * r, 3, c, length)  # different on every rank: no communication in eval
    assert torch.allclose(sync(x), ref(x), atol=1e-6)


def test_sync_batch_norm_needs_two_values_per_channel_over_all_ranks():
    """One value per channel in the whole batch is an error on every rank
    (torch's BatchNorm refuses it too), not a hang or a NaN."""
    sync_bn = hvd.SyncBatchNorm(3)
    x = torch.ones(1 if hvd.rank() == 0 else 0, 3)
    with pytest.raises(hvd.KoloInvalidArgumentError, match="expected more than 1 value per channel"):
        sync_bn(x)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="par.sbn.after").item() == hvd.size()


def test_sync_batch_norm_horovod_case_on_the_cpu():
    """Horovod's test_horovod_sync_batch_norm (there on CUDA only), with its
    tolerances: one row per rank against BatchNorm1d on all rows."""
    n, r = hvd.size(), hvd.rank()
    ts_list = [
        torch.stack([torch.tensor([[k, k + 1], [k * 2, k * 2 + 1], [k * 3, k * 3 + 1],
                                   [k * 4, k * 4 + 1]]) for k in range(n)]),
        torch.stack([torch.tensor([[k + 1], [k * 2 + 1], [k * 3 + 1], [k * 4 + 1]])
                     for k in range(n)]),
    ]
    for i, ts in enumerate(ts_list):
        sync_bn = hvd.SyncBatchNorm(num_features=4)
        bn = torch.nn.BatchNorm1d(num_features=4)
        ts = ts.float()
        ts1 = ts.clone().requires_grad_()
        ts2 = ts.clone().requires_grad_()
        sync_bn_out = sync_bn(ts1[r].unsqueeze(0))
        bn_out = bn(ts2)
        assert (sync_bn_out - bn_out[r].unsqueeze(0)).abs().sum() < 1e-6
        assert (sync_bn.running_mean - bn.running_mean).abs().sum() < 1e-6
        assert (sync_bn.running_var - bn.running_var).abs().sum() < 1e-6
        sync_bn_out.sum().backward()
        bn_out.mean(dim=0).sum().backward()
        name = "par.sbn.hvd.%d." % i
        assert (hvd.allreduce(sync_bn.weight.grad, name=name + "w") - bn.weight.grad).abs().sum() < 1e-6
        assert (hvd.allreduce(sync_bn.bias.grad, name=name + "b") - bn.bias.grad).abs().sum() < 1e-6
        assert (hvd.allreduce(ts1.grad, name=name + "x") - ts2.grad).abs().sum() < 1e-6


def test_sync_batch_norm_in_a_model_with_distributed_optimizer():
    """2-D input and convert_sync_batchnorm; after a step, every rank has the
    same parameters and running statistics."""
    r = hvd.rank()
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6),
                                torch.nn.ReLU(), torch.nn.Linear(6, 1))
    model = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(model[1], hvd.SyncBatchNorm)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x = torch.linspace(-2, 2, 4 * (3 + r)).reshape(3 + r, 4) * (r + 1)
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
    for name, t in model.state_dict().items():
        assert same_on_all_ranks(t, "par.sbn.model." + name), name
    with pytest.raises(ValueError, match="expected at least 2D input"):
        model[1](torch.ones(6))


# ---- sparse gradients ----------------------------------------------------------------


def test_sparse_allreduce_async_gathers_indices_and_values():
    n, r = hvd.size(), hvd.rank()
    dense = torch.zeros(6, 2)
    dense[r] = r + 1.0
    dense[5] = 1.0
    t = dense.to_sparse()
    handle = hvd.sparse_allreduce_async(t, name="par.sparse", op=hvd.Sum)
    out = handle()  # Horovod's handles are callables
    assert out.is_sparse and hvd.synchronize(handle) is out
    want = torch.zeros(6, 2)
    for k in range(n):
        want[k] += k + 1.0
    want[5] = n
    assert torch.allclose(out.to_dense(), want)
    avg = hvd.synchronize(hvd.sparse_allreduce_async(t, name="par.sparse.avg", op=hvd.Average))
    assert torch.allclose(avg.to_dense(), want / n)
    empty = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.int64), torch.zeros(0), (4, 4))
    got = hvd.sparse_allreduce_async(empty if r else torch.eye(4).to_sparse(),
                                     name="par.sparse.empty", op=hvd.Sum)()
    assert torch.equal(got.to_dense(), torch.eye(4))


@pytest.mark.parametrize("sparse_as_dense", [False, True], ids=["allgather", "as_dense"])
def test_distributed_optimizer_with_sparse_embedding(sparse_as_dense):
    n, r = hvd.size(), hvd.rank()
    emb = torch.nn.Embedding(10, 3, sparse=True)
    head = torch.nn.Linear(3, 1)
    with torch.no_grad():
        emb.weight.copy_(torch.arange(30, dtype=torch.float32).reshape(10, 3) * 0.05)
        head.weight.fill_(0.5)
        head.bias.zero_()
    start = emb.weight.detach().clone()
    named = [("emb." + k, v) for k, v in emb.named_parameters()] + \
            [("head." + k, v) for k, v in head.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in named], lr=1.0),
                                   named_parameters=named, sparse_as_dense=sparse_as_dense)
    ids = torch.tensor([r, r + 1, 7])
    opt.zero_grad()
    head(emb(ids)).sum().backward()
    assert emb.weight.grad.is_sparse
    opt.step()
    assert emb.weight.grad.is_sparse
    want = torch.zeros(10, 3)
    for k in range(n):
        for row in (k, k + 1, 7):
            want[row] += 0.5 / n
    assert torch.allclose(emb.weight.detach(), start - want, atol=1e-6)
    assert same_on_all_ranks(emb.weight, "par.sparse.opt.%d" % sparse_as_dense)


def test_sparse_adam_keeps_sparse_gradients_and_names_match_horovod():
    """Horovod's test_sparse_embeddings (SparseAdam needs sparse gradients
    after the reduction, also with sparse_as_dense) and
    test_optimizer_no_named_parameters (its _parameter_names)."""
    r = hvd.rank()
    for sparse_as_dense in (False, True):
        model = torch.nn.Embedding(10, 3, sparse=True)
        inp = torch.LongTensor([[1, 2, 4, 5], [4, 3, 2, 9]] if r == 0 else [[1, 3, 4], [4, 7, 9]])
        opt = torch.optim.SparseAdam(list(model.parameters()), lr=0.1)
        opt = hvd.DistributedOptimizer(opt, sparse_as_dense=sparse_as_dense)
        loss = model(inp).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 10))
    optimizer = torch.optim.SGD([{"params": model[0].parameters()},
                                 {"params": model[1].parameters()}], lr=0.001)
    optimizer = hvd.DistributedOptimizer(optimizer)
    assert optimizer.backward_passes_per_step == 1 and optimizer.op == hvd.Average
    optimizer.set_backward_passes_per_step(2)
    assert optimizer.backward_passes_per_step == 2
    assert not optimizer.sparse_as_dense and optimizer.gradient_predivide_factor == 1.0
    params = optimizer._parameter_names
    assert len(params) == len(set(params.values())) == 4
    all_names = hvd.allgather_object(set(params.values()))
    assert all(names == all_names[0] for names in all_names)


# ---- compression, optimizer state, objects ------------------------------------------------


@pytest.mark.parametrize("compression", [hvd.Compression.fp16, hvd.Compression.bf16],
                         ids=["fp16", "bf16"])
def test_compression_on_allreduce_grouped_reducescatter_and_optimizer(compression):
    n, r = hvd.size(), hvd.rank()
    x = torch.full((2 * n, 3), r + 1.0, dtype=torch.float64)
    total = n * (n + 1) / 2
    got = hvd.allreduce(x, op=hvd.Sum, compression=compression, name="par.comp.ar")
    assert got.dtype == torch.float64 and torch.allclose(got, torch.full_like(x, total))
    ints = hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Sum, compression=compression,
                         name="par.comp.int")  # not floating: sent as it is
    assert ints.dtype == torch.int32 and torch.equal(ints, torch.full((3,), n, dtype=torch.int32))
    outs = hvd.grouped_allreduce([x, x.float()], op=hvd.Sum, compression=compression,
                                 name="par.comp.grouped")
    assert [o.dtype for o in outs] == [torch.float64, torch.float32]
    rs = hvd.reducescatter(x, op=hvd.Sum, compression=compression, name="par.comp.rs")
    assert rs.dtype == torch.float64
    assert torch.allclose(rs, torch.full((2, 3), total, dtype=torch.float64))
    model = torch.nn.Linear(3, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   compression=compression)
    opt.zero_grad()
    model(torch.ones(2, 3) * (r + 1)).sum().backward()
    opt.step()
    assert model.weight.grad.dtype == torch.float32
    assert same_on_all_ranks(model.weight, "par.comp.opt")


def test_broadcast_optimizer_state_with_parameters_without_gradients():
    """Horovod's test_broadcast_state_no_grad: a parameter that never gets a
    gradient is skipped; the others get a (zero) gradient, as after
    Horovod's initialising step."""

    class ModelNoGrad(torch.nn.Module):
        def __init__(self, a, b):
            super().__init__()
            self.a = torch.nn.Parameter(a.int(), requires_grad=False)
            self.b = torch.nn.Parameter(b)

        def forward(self, x):
            return torch.index_select(self.b, 0, self.a.long()) * x

    model = ModelNoGrad(torch.tensor([1.0, 3.0]), torch.rand(4))
    opt = torch.optim.SGD(model.parameters(), lr=0.001, weight_decay=1e-6, momentum=0.9,
                          nesterov=True)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    grad = opt.param_groups[0]["params"][1].grad
    bgrad = hvd.broadcast(grad, root_rank=0, name="par.nograd.grad")
    assert opt.param_groups[0]["params"][0].grad is None
    assert torch.equal(grad, bgrad)


def test_broadcast_optimizer_state_when_only_some_ranks_have_state():
    r = hvd.rank()
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    model[1].weight.requires_grad_(False)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.01)
    if r == 0:  # root has stepped; the others are fresh
        model(torch.ones(2, 3)).sum().backward()
        opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    state = opt.state_dict()["state"]
    assert len(state) == 3
    for key in sorted(state):
        for name, value in sorted(state[key].items()):
            if torch.is_tensor(value):
                assert same_on_all_ranks(value, "par.state.%s.%s" % (key, name)), (key, name)


def test_object_collectives_like_horovod():
    r, n = hvd.rank(), hvd.size()
    obj = {"rank": r, "payload": list(range(r))}
    assert hvd.allgather_object(obj) == [{"rank": k, "payload": list(range(k))} for k in range(n)]
    assert hvd.broadcast_object(obj, root_rank=n - 1) == {"rank": n - 1,
                                                         "payload": list(range(n - 1))}
    assert hvd.broadcast_object(obj, 0, name="par.obj.named")["rank"] == 0
    assert hvd.broadcast_object(None if r else [1, 2]) == [1, 2]
    # cloudpickle (a dependency, as in Horovod): closures travel too.
    offset = 10 * n
    fn = hvd.broadcast_object(lambda v: v + offset if r == 0 else None, 0, name="par.obj.fn")
    assert fn(1) == offset + 1
    funcs = hvd.allgather_object(lambda v, k=r: v * (k + 1), name="par.obj.fns")
    assert [f(2) for f in funcs] == [2 * (k + 1) for k in range(n)]
    if r == 0:  # the root gets its own object back, as in Horovod
        assert hvd.broadcast_object(obj, 0, name="par.obj.same") is obj
    else:
        assert hvd.broadcast_object(obj, 0, name="par.obj.same") == {"rank": 0, "payload": []}


# ---- the public surface ------------------------------------------------------------------------

# horovod.torch's public names (0.28) that kolo provides (elastic lives in
# kolo.torch.elastic, as horovod.torch.elastic).
HOROVOD_NAMES = """
Compression allgather_object broadcast_object broadcast_optimizer_state broadcast_parameters
allreduce allreduce_async allreduce_ allreduce_async_ grouped_allreduce grouped_allreduce_async
grouped_allreduce_ grouped_allreduce_async_ sparse_allreduce_async allgather allgather_async
broadcast broadcast_async broadcast_ broadcast_async_ alltoall alltoall_async reducescatter
reducescatter_async join barrier poll synchronize init shutdown is_initialized start_timeline
stop_timeline size local_size cross_size rank local_rank cross_rank mpi_threads_supported
mpi_enabled mpi_built gloo_enabled gloo_built nccl_built ddl_built ccl_built cuda_built
rocm_built Average Sum Adasum Min Max Product HorovodInternalError DistributedOptimizer
SyncBatchNorm is_homogeneous ProcessSet add_process_set remove_process_set global_process_set
grouped_allgather grouped_allgather_async grouped_reducescatter grouped_reducescatter_async
""".split()


def test_horovod_public_names_exist_and_mpi_ops_mirrors_them():
    missing = [name for name in HOROVOD_NAMES if not hasattr(hvd, name)]
    assert not missing
    from kolo.torch import mpi_ops
    from kolo.torch.mpi_ops import Adasum, synchronize  # noqa: F401 (Horovod programs do this)
    assert all(getattr(mpi_ops, name) is getattr(hvd, name) for name in HOROVOD_NAMES)
    import kolo.torch.compression
    import kolo.torch.functions
    import kolo.torch.optimizer
    import kolo.torch.sync_batch_norm  # noqa: F401
    with pytest.raises(NotImplementedError, match="kolorun --mpi"):
        hvd.init(comm=[0, 1])
