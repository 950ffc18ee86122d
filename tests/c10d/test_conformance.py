"""Every torch.distributed call on kolo's backend gives what gloo gives in the
same torch, at every world size the suite runs with (2 and 3).

Each case runs one call on the gloo group and on kolo's group with the same
inputs and compares the results. Where gloo itself refuses a call (an op or
dtype it lacks, such as ReduceOp.AVG or the list form of all_to_all), kolo's
result is compared with the value computed here from every rank's inputs.
"""
import pytest
import torch
import torch.distributed as dist

from conftest import GLOO, KOLO, TORCH2, contribution, gloo_supports

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.int8, torch.uint8, torch.int16]
SHAPES = [(), (5,), (3, 4), (0,)]
OPS = ["SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR"]


def everyone(size, dtype, shape=(3, 4), seed=0):
    return [contribution(r, dtype, shape, seed) for r in range(size)]


def fold(tensors, op):
    """The reduction of tensors as torch computes it elementwise."""
    acc = tensors[0].clone()
    for t in tensors[1:]:
        if op == "SUM" or op == "AVG":
            acc = acc + t
        elif op == "PRODUCT":
            acc = acc * t
        elif op == "MIN":
            acc = torch.minimum(acc, t)
        elif op == "MAX":
            acc = torch.maximum(acc, t)
        elif op == "BAND":
            acc = acc & t
        elif op == "BOR":
            acc = acc | t
        elif op == "BXOR":
            acc = acc ^ t
    if op == "AVG":
        acc = acc / len(tensors) if acc.is_floating_point() else acc // len(tensors)
    return acc.to(tensors[0].dtype)


def defined(op, dtype):
    """Whether op means something for dtype (torch refuses the others)."""
    if op in ("BAND", "BOR", "BXOR"):
        return not dtype.is_floating_point
    if op == "AVG":
        return dtype != torch.bool
    return True


def close(a, b):
    if a.dtype in (torch.float16, torch.bfloat16):
        return torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2)
    if a.is_floating_point():
        return torch.allclose(a, b, rtol=1e-6, atol=1e-6)
    return torch.equal(a, b)


def check(kolo_out, reference, what):
    if isinstance(reference, (list, tuple)):
        assert len(kolo_out) == len(reference), what
        for i, (k, r) in enumerate(zip(kolo_out, reference)):
            check(k, r, "%s[%d]" % (what, i))
        return
    assert kolo_out.dtype == reference.dtype and kolo_out.shape == reference.shape, (
        "%s: kolo gave %s%s, expected %s%s" % (what, kolo_out.dtype, list(kolo_out.shape),
                                              reference.dtype, list(reference.shape)))
    assert close(kolo_out, reference), "%s: kolo gave %s, expected %s" % (what, kolo_out, reference)


def compare(call, expected, what, against_gloo=True, run_gloo=True):
    """call(group) -> result on gloo and kolo; expected: the value computed
    here, used where gloo refuses the call. Returns which reference held."""
    ok, gloo_out = gloo_supports(call) if run_gloo else (False, None)
    kolo_out = call(KOLO)
    if ok and against_gloo:
        check(kolo_out, gloo_out, what + " (against gloo)")
    check(kolo_out, expected, what + " (against the expected value)")
    return "gloo" if ok else "expected"


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_all_reduce(op, dtype, rank, size):
    if not defined(op, dtype):
        pytest.skip("ReduceOp.%s is not defined for %s (torch refuses it too)" % (op, dtype))
    for shape in SHAPES:
        def call(group):
            t = contribution(rank, dtype, shape)
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=group)
            return t
        compare(call, fold(everyone(size, dtype, shape), op), "all_reduce %s %s%s" % (op, dtype, shape))


def test_all_reduce_complex_and_non_contiguous(rank, size):
    def complex_sum(group):
        t = contribution(rank, torch.complex64, (4,))
        dist.all_reduce(t, group=group)
        return t
    compare(complex_sum, fold(everyone(size, torch.complex64, (4,)), "SUM"), "complex all_reduce")

    def strided(group):
        t = contribution(rank, torch.float32, (4, 6))[:, ::2]
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return t
    expected = fold([contribution(r, torch.float32, (4, 6))[:, ::2] for r in range(size)], "MAX")
    # gloo reduces a strided view's storage rather than the view: its result
    # is wrong in torch 1.13 and 2.11 alike, so only the expected value counts.
    compare(strided, expected, "all_reduce of a strided view", against_gloo=False)


def test_all_reduce_premul_sum(rank, size):
    t = contribution(rank, torch.float32, (6,))
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5), group=KOLO)
    check(t, fold(everyone(size, torch.float32, (6,)), "SUM") * 0.5, "all_reduce PREMUL_SUM(0.5)")


def test_all_reduce_coalesced(rank, size):
    dtypes = [torch.float32, torch.float32, torch.float32]  # torch wants one dtype

    def call(group):
        ts = [contribution(rank, d, (2, 3), seed=i) for i, d in enumerate(dtypes)]
        dist.all_reduce_coalesced(ts, group=group)
        return ts
    expected = [fold([contribution(r, d, (2, 3), seed=i) for r in range(size)], "SUM")
                for i, d in enumerate(dtypes)]
    with _quiet():
        compare(call, expected, "all_reduce_coalesced")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16], ids=str)
def test_broadcast(dtype, rank, size):
    for src in range(size):
        for shape in SHAPES:
            def call(group):
                t = contribution(rank, dtype, shape)
                dist.broadcast(t, src=src, group=group)
                return t
            compare(call, contribution(src, dtype, shape), "broadcast src=%d %s" % (src, shape))


@pytest.mark.parametrize("op", ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BXOR"])
def test_reduce(op, rank, size):
    dtype = torch.int32 if op.startswith("B") else torch.float32
    for dst in range(size):
        def call(group):
            t = contribution(rank, dtype)
            dist.reduce(t, dst=dst, op=getattr(dist.ReduceOp, op), group=group)
            # Only the destination's result is defined.
            return t if rank == dst else torch.zeros(0)
        expected = fold(everyone(size, dtype), op) if rank == dst else torch.zeros(0)
        compare(call, expected, "reduce %s dst=%d" % (op, dst))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.float16], ids=str)
def test_all_gather(dtype, rank, size):
    for shape in SHAPES:
        def call(group):
            out = [torch.full(shape, -1).to(dtype) for _ in range(size)]
            dist.all_gather(out, contribution(rank, dtype, shape), group=group)
            return out
        # gloo dies of SIGFPE on an empty all_gather (torch 1.13's gloo).
        compare(call, everyone(size, dtype, shape), "all_gather %s" % (shape,),
                run_gloo=0 not in shape)


def test_all_gather_into_tensor(rank, size):
    gather = dist.all_gather_into_tensor
    for shape in [(5,), (2, 3)]:
        for stacked in (False, True):
            def call(group):
                out_shape = (size,) + shape if stacked else (size * shape[0],) + shape[1:]
                out = torch.full(out_shape, -1.0)
                gather(out, contribution(rank, torch.float32, shape), group=group)
                return out
            expected = (torch.stack if stacked else torch.cat)(everyone(size, torch.float32, shape))
            compare(call, expected, "all_gather_into_tensor %s stacked=%s" % (shape, stacked))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16, torch.complex64],
                         ids=str)
def test_all_gather_coalesced(dtype, rank, size):
    """torch's layout: output_tensor_lists[r][i] gets rank r's input i; inputs
    of several shapes, an empty one among them."""
    shapes = [(2,), (3, 1), (0,), ()]

    def call(group):
        ins = [contribution(rank, dtype, s, seed=i) for i, s in enumerate(shapes)]
        outs = [[torch.full_like(t, 7) for t in ins] for _ in range(size)]
        dist.all_gather_coalesced(outs, ins, group=group)
        return [t for per_rank in outs for t in per_rank]
    expected = [contribution(r, dtype, s, seed=i) for r in range(size) for i, s in enumerate(shapes)]
    with _quiet():
        assert compare(call, expected, "all_gather_coalesced %s" % dtype) == "gloo"


def test_all_gather_coalesced_refuses_what_gloo_refuses(rank, size):
    ins = [contribution(rank, torch.float32, (2,)), contribution(rank, torch.float32, (3,))]
    layouts = {
        "no inputs": ([], [[] for _ in range(size)]),
        # One list per input (each holding one tensor per rank) is not torch's layout.
        "one list per input": (ins, [[torch.zeros_like(t) for _ in range(size)] for t in ins]),
        "a list short": (ins, [[torch.zeros_like(t) for t in ins] for _ in range(size - 1)]),
        "a wrong shape": (ins, [[torch.zeros(5) for _ in ins] for _ in range(size)]),
        "a wrong dtype": (ins, [[torch.zeros_like(t, dtype=torch.float64) for t in ins]
                                for _ in range(size)]),
    }
    for what, (inputs, outputs) in layouts.items():
        with _quiet():
            ok, why = gloo_supports(lambda g: dist.all_gather_coalesced(outputs, inputs, group=g))
            assert not ok, "gloo took %s" % what
            if not inputs:  # torch 2.x's dispatcher refuses it before any backend sees it
                with pytest.raises((ValueError, NotImplementedError)):
                    dist.all_gather_coalesced(outputs, inputs, group=KOLO)
                continue
            with pytest.raises(ValueError, match="all_gather_coalesced"):
                dist.all_gather_coalesced(outputs, inputs, group=KOLO)


@pytest.mark.parametrize("op", ["SUM", "MAX", "AVG", "PRODUCT"])
def test_reduce_scatter(op, rank, size):
    inputs = lambda r: [contribution(r, torch.float32, (2, 3), seed=d) for d in range(size)]

    def call(group):
        out = torch.full((2, 3), -1.0)
        dist.reduce_scatter(out, inputs(rank), op=getattr(dist.ReduceOp, op), group=group)
        return out
    expected = fold([inputs(r)[rank] for r in range(size)], op)
    compare(call, expected, "reduce_scatter %s" % op)


@pytest.mark.parametrize("op", ["SUM", "MIN", "AVG"])
def test_reduce_scatter_tensor(op, rank, size):
    scatter = dist.reduce_scatter_tensor

    def call(group):
        out = torch.full((4,), -1.0)
        scatter(out, contribution(rank, torch.float32, (size * 4,)),
                op=getattr(dist.ReduceOp, op), group=group)
        return out
    expected = fold(everyone(size, torch.float32, (size * 4,)), op)[rank * 4:(rank + 1) * 4]
    compare(call, expected, "reduce_scatter_tensor %s" % op)


def test_all_to_all_single(rank, size):
    # Rank r sends r + j + 1 rows to rank j.
    send = [rank + j + 1 for j in range(size)]
    recv = [r + rank + 1 for r in range(size)]

    def rows_of(r):
        return torch.arange(sum(r2 + j + 1 for j in range(size) for r2 in [r]) * 2,
                            dtype=torch.float32).reshape(-1, 2) + 100 * r

    def call(group):
        out = torch.full((sum(recv), 2), -1.0)
        dist.all_to_all_single(out, rows_of(rank), output_split_sizes=recv,
                               input_split_sizes=send, group=group)
        return out
    blocks = []
    for r in range(size):
        splits = [r + j + 1 for j in range(size)]
        blocks.append(rows_of(r).split(splits)[rank])
    compare(call, torch.cat(blocks), "all_to_all_single with split sizes")

    def even(group):
        out = torch.empty(size * 3)
        dist.all_to_all_single(out, contribution(rank, torch.float32, (size * 3,)), group=group)
        return out
    expected = torch.cat([everyone(size, torch.float32, (size * 3,))[r][rank * 3:rank * 3 + 3]
                          for r in range(size)])
    compare(even, expected, "all_to_all_single even")


def test_all_to_all(rank, size):
    def call(group):
        ins = [torch.full((j + 1, 2), float(10 * rank + j)) for j in range(size)]
        outs = [torch.empty(rank + 1, 2) for _ in range(size)]
        dist.all_to_all(outs, ins, group=group)
        return outs
    expected = [torch.full((rank + 1, 2), float(10 * r + rank)) for r in range(size)]
    compare(call, expected, "all_to_all")


def test_gather(rank, size):
    for dst in range(size):
        def call(group):
            out = [torch.zeros(3, 2) for _ in range(size)] if rank == dst else None
            dist.gather(contribution(rank, torch.float32, (3, 2)), out, dst=dst, group=group)
            return out if rank == dst else []
        expected = everyone(size, torch.float32, (3, 2)) if rank == dst else []
        compare(call, expected, "gather dst=%d" % dst)


def test_scatter(rank, size):
    for src in range(size):
        def call(group):
            out = torch.zeros(2, 2)
            ins = [torch.full((2, 2), float(j + 10 * src)) for j in range(size)]
            dist.scatter(out, ins if rank == src else None, src=src, group=group)
            return out
        compare(call, torch.full((2, 2), float(rank + 10 * src)), "scatter src=%d" % src)


def test_barrier(rank, size):
    dist.barrier(group=KOLO)
    dist.barrier(group=GLOO)


def test_send_recv_and_isend_irecv(rank, size):
    # Every rank sends to the next and receives from the previous, two tags.
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    for group in (GLOO, KOLO):
        reqs = [dist.isend(torch.full((3,), float(rank)), nxt, group=group, tag=1),
                dist.isend(torch.full((2,), float(rank + 100)), nxt, group=group, tag=2)]
        a, b = torch.empty(3), torch.empty(2)
        reqs += [dist.irecv(b, prev, group=group, tag=2), dist.irecv(a, prev, group=group, tag=1)]
        for r in reqs:
            r.wait()
        check(a, torch.full((3,), float(prev)), "irecv tag 1")
        check(b, torch.full((2,), float(prev + 100)), "irecv tag 2")
    # Blocking, in order: rank 0 sends to everyone, they answer.
    if rank == 0:
        for peer in range(1, size):
            dist.send(torch.tensor([peer * 1.5]), peer, group=KOLO)
        for peer in range(1, size):
            back = torch.zeros(1)
            dist.recv(back, peer, group=KOLO)
            check(back, torch.tensor([peer * 3.0]), "answer")
    else:
        x = torch.zeros(1)
        dist.recv(x, 0, group=KOLO)
        dist.send(x * 2, 0, group=KOLO)


def test_batch_isend_irecv(rank, size):
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    for group in (GLOO, KOLO):
        send = torch.arange(4, dtype=torch.float32) + rank
        recv = torch.empty(4)
        ops = [dist.P2POp(dist.isend, send, nxt, group=group),
               dist.P2POp(dist.irecv, recv, prev, group=group)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        check(recv, torch.arange(4, dtype=torch.float32) + prev, "batch_isend_irecv")


@pytest.mark.skipif(not TORCH2, reason="torch 1.13 has no _coalescing_manager")
def test_coalesced_forms_of_torch2(rank, size):
    """What torch 2.x asks a backend for under _coalescing_manager (FSDP2 does)."""
    from torch.distributed.distributed_c10d import _coalescing_manager

    def gathers(group):
        outs = [torch.empty(size * 2), torch.empty(size * 3)]
        with _coalescing_manager(group=group, async_ops=True) as cm:
            dist.all_gather_into_tensor(outs[0], contribution(rank, torch.float32, (2,)), group=group)
            dist.all_gather_into_tensor(outs[1], contribution(rank, torch.float32, (3,)), group=group)
        cm.wait()
        return outs
    compare(gathers, [torch.cat(everyone(size, torch.float32, (2,))),
                      torch.cat(everyone(size, torch.float32, (3,)))], "coalesced all_gather")

    def scatters(group):
        outs = [torch.empty(2), torch.empty(3)]
        with _coalescing_manager(group=group, async_ops=True) as cm:
            dist.reduce_scatter_tensor(outs[0], contribution(rank, torch.float32, (size * 2,)),
                                       group=group)
            dist.reduce_scatter_tensor(outs[1], contribution(rank, torch.float32, (size * 3,)),
                                       group=group)
        cm.wait()
        return outs
    sums = [fold(everyone(size, torch.float32, (size * n,)), "SUM") for n in (2, 3)]
    compare(scatters, [sums[0][rank * 2:rank * 2 + 2], sums[1][rank * 3:rank * 3 + 3]],
            "coalesced reduce_scatter")

    def reduces(group):
        ts = [contribution(rank, torch.float32, (4,)), contribution(rank, torch.float32, (2,))]
        with _coalescing_manager(group=group, async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t, group=group)
        cm.wait()
        return ts
    compare(reduces, [fold(everyone(size, torch.float32, (n,)), "SUM") for n in (4, 2)],
            "coalesced all_reduce")


class _quiet:
    """Silences the deprecation warnings of the coalesced calls."""

    def __enter__(self):
        import warnings
        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)
