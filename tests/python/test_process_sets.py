"""Process sets from Python: static (init) and dynamic (add/remove) sets,
every operation with process_set=, errors, and the training helpers, as
Horovod programs use them (even/odd ranks)."""
import pytest
import torch

import kolo.torch as hvd


def even_odd():
    n = hvd.size()
    return [r for r in range(n) if r % 2 == 0], [r for r in range(n) if r % 2 == 1]


@pytest.fixture
def sets():
    """Every rank's set of the even/odd split, added dynamically; removed
    after the test."""
    even_ranks, odd_ranks = even_odd()
    even = hvd.add_process_set(even_ranks)
    odd = hvd.add_process_set(hvd.ProcessSet(odd_ranks))
    mine = even if hvd.rank() % 2 == 0 else odd
    yield even, odd, mine
    assert hvd.remove_process_set(odd)
    assert hvd.remove_process_set(even)


def test_global_process_set():
    ps = hvd.global_process_set
    assert ps.process_set_id == 0
    assert ps.ranks == list(range(hvd.size()))
    assert ps.size() == hvd.size() and ps.rank() == hvd.rank() and ps.included()
    assert str(ps) == "ProcessSet(process_set_id=0, ranks=%s, mpi_comm=None)" % ps.ranks
    assert hvd.remove_process_set(hvd.global_process_set) is False


def test_set_queries_and_ops(sets):
    even, odd, mine = sets
    r = hvd.rank()
    assert (even.process_set_id, odd.process_set_id) != (None, None)
    assert mine.included() and not (odd if mine is even else even).included()
    assert mine.rank() == mine.ranks.index(r) and mine.size() == len(mine.ranks)
    assert (odd if mine is even else even).rank() == -1
    n = mine.size()
    me = mine.rank()

    summed = hvd.allreduce(torch.full((3,), float(r)), op=hvd.Sum, name="ps.ar",
                           process_set=mine)
    assert torch.equal(summed, torch.full((3,), float(sum(mine.ranks))))
    avg = hvd.allreduce(torch.full((2,), float(r)), name="ps.avg", process_set=mine)
    assert torch.allclose(avg, torch.full((2,), sum(mine.ranks) / n))
    t = torch.full((2,), float(r))
    hvd.allreduce_(t, op=hvd.Sum, name="ps.ar_", process_set=mine)
    assert t[0].item() == sum(mine.ranks)
    a, b = hvd.grouped_allreduce([torch.ones(2) * r, torch.ones(3)], op=hvd.Sum,
                                 name="ps.gar", process_set=mine)
    assert a[0].item() == sum(mine.ranks) and b[0].item() == n

    # allgather: blocks in the set's rank order; rank r gives r + 1 rows
    g = hvd.allgather(torch.full((r + 1, 2), float(r)), name="ps.ag", process_set=mine)
    assert g[:, 0].tolist() == [float(s) for s in mine.ranks for _ in range(s + 1)]
    g1, g2 = hvd.grouped_allgather([torch.full((1,), float(r)), torch.full((2, 2), float(r))],
                                   name="ps.gag", process_set=mine)
    assert g1.tolist() == [float(s) for s in mine.ranks] and g2.shape == (2 * n, 2)

    # broadcast: root_rank is a rank of the job
    root = mine.ranks[-1]
    bc = hvd.broadcast(torch.full((2,), float(r)), root, name="ps.bc", process_set=mine)
    assert torch.equal(bc, torch.full((2,), float(root)))
    t = torch.full((2,), float(r))
    hvd.broadcast_(t, root_rank=root, name="ps.bc_", process_set=mine)
    assert t[0].item() == root

    # alltoall: one row to every member; received splits per member
    out, received = hvd.alltoall(torch.arange(n, dtype=torch.float32) + 10 * r,
                                 splits=[1] * n, name="ps.a2a", process_set=mine)
    assert out.tolist() == [10.0 * s + me for s in mine.ranks]
    assert received.tolist() == [1] * n

    # reducescatter: rows split among the members
    rows = 2 * n + 1
    rs = hvd.reducescatter(torch.ones(rows, 2) * (r + 1), op=hvd.Sum, name="ps.rs",
                           process_set=mine)
    share = rows // n + (1 if me < rows % n else 0)
    assert rs.shape == (share, 2) and rs[0, 0].item() == sum(s + 1 for s in mine.ranks)
    x, y = hvd.grouped_reducescatter([torch.ones(n), torch.ones(2 * n)], op=hvd.Sum,
                                     name="ps.grs", process_set=mine)
    assert x.tolist() == [float(n)] and y.tolist() == [float(n)] * 2

    hvd.barrier(process_set=mine)
    assert hvd.join(process_set=mine) in mine.ranks


def test_async_forms_with_process_set(sets):
    _, _, mine = sets
    r = hvd.rank()
    handles = [
        hvd.allreduce_async(torch.ones(2) * r, None, "ps.async.ar", hvd.Sum, 1.0, 1.0, mine),
        hvd.allgather_async(torch.ones(1) * r, "ps.async.ag", mine),
        hvd.broadcast_async(torch.ones(1) * r, mine.ranks[0], "ps.async.bc", mine),
        hvd.alltoall_async(torch.ones(mine.size()) * r, None, "ps.async.a2a", mine),
        hvd.reducescatter_async(torch.ones(mine.size()), "ps.async.rs", hvd.Sum, 1.0, 1.0,
                                mine),
        hvd.grouped_allgather_async([torch.ones(1)], "ps.async.gag", mine),
        hvd.grouped_reducescatter_async([torch.ones(mine.size())], "ps.async.grs", hvd.Sum,
                                        process_set=mine),
    ]
    results = [hvd.synchronize(h) for h in handles]
    assert results[0][0].item() == sum(mine.ranks)
    assert results[1].tolist() == [float(s) for s in mine.ranks]
    assert results[2].item() == mine.ranks[0]
    assert results[3][1].tolist() == [1] * mine.size()  # (tensor, received splits)
    assert results[4].tolist() == [float(mine.size())]
    assert results[6][0].tolist() == [float(mine.size())]


def test_errors_name_the_set(sets):
    even, odd, mine = sets
    other = odd if mine is even else even
    if other.size():
        with pytest.raises(ValueError, match="not a member of process set %d"
                           % other.process_set_id):
            hvd.allreduce(torch.ones(1), name="ps.foreign", process_set=other)
    outsider = next((s for s in range(hvd.size()) if s not in mine.ranks), None)
    if outsider is not None:
        with pytest.raises(ValueError, match="root rank %d is not a member" % outsider):
            hvd.broadcast(torch.ones(1), outsider, name="ps.badroot", process_set=mine)
    with pytest.raises(ValueError, match="already has these ranks"):
        hvd.add_process_set(list(mine.ranks))
    with pytest.raises(ValueError, match="already has these ranks"):
        hvd.add_process_set(list(range(hvd.size())))
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(1), process_set=hvd.ProcessSet([0]))
    with pytest.raises(ValueError):
        hvd.ProcessSet("0,1")
    if mine.size() > 1:
        t = torch.ones(2 + mine.rank())
        with pytest.raises(hvd.KoloMismatchError, match=r"process set %d \(ranks"
                           % mine.process_set_id):
            hvd.allreduce(t, name="ps.mismatch", process_set=mine)


def test_removed_set_is_invalidated():
    ps = hvd.add_process_set([0])
    assert ps.process_set_id is not None
    assert hvd.remove_process_set(ps) is True
    assert ps.process_set_id is None and ps.ranks is None
    assert hvd.remove_process_set(ps) is False


def test_training_helpers_with_process_set(sets):
    _, _, mine = sets
    r = hvd.rank()
    torch.manual_seed(r)
    model = torch.nn.Linear(3, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=mine.ranks[0], process_set=mine)
    reference = hvd.broadcast_object(
        [p.detach().clone() for p in model.parameters()] if r == mine.ranks[0] else None,
        root_rank=mine.ranks[0], process_set=mine)
    for p, q in zip(model.parameters(), reference):
        assert torch.equal(p.detach(), q)
    assert hvd.allgather_object(r, process_set=mine) == mine.ranks
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(),
                                   process_set=mine)
    hvd.broadcast_optimizer_state(opt, root_rank=mine.ranks[0], process_set=mine)
    before = model.weight.detach().clone()
    x = torch.full((1, 3), float(r + 1))
    model(x).sum().backward()
    opt.step()
    # The gradient of weight is x; averaged over the set's members.
    mean_x = sum(s + 1 for s in mine.ranks) / mine.size()
    assert torch.allclose(model.weight.detach(), before - mean_x)


def test_sparse_and_adasum_with_process_set(sets):
    """The parity features reduce among the set only: sparse allreduce (its
    Average divides by the set's size) and the Adasum delta optimizer."""
    _, _, mine = sets
    r = hvd.rank()
    n = mine.size()
    dense = torch.zeros(4, 2)
    dense[r % 4] = float(r + 1)
    h = hvd.sparse_allreduce_async(dense.to_sparse(), name="ps.sparse", process_set=mine)
    expected = torch.zeros(4, 2)
    for s in mine.ranks:
        expected[s % 4] += float(s + 1) / n
    assert torch.allclose(hvd.synchronize(h).to_dense(), expected)

    # Adasum of identical updates is that update; the set's ranks agree.
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1, bias=False)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters(),
                                   op=hvd.Adasum, process_set=mine)
    before = model.weight.detach().clone()
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    assert torch.allclose(model.weight.detach(), before - 0.5)
    gathered = hvd.allgather(model.weight.detach(), name="ps.adasum.w", process_set=mine)
    assert all(torch.equal(gathered[0], row) for row in gathered)


def test_static_sets_through_init():
    even_ranks, odd_ranks = even_odd()
    even, odd = hvd.ProcessSet(even_ranks), hvd.ProcessSet(odd_ranks)
    # A rank's shutdown fails what the others still have pending, and ops
    # in disjoint sets end at different times: every rank is done with its
    # earlier ones (some in a set of its own) before any rank shuts down.
    hvd.barrier()
    hvd.shutdown()
    try:
        hvd.init(process_sets=[even, odd] if odd_ranks else [even])
        assert even.process_set_id == 1
        mine = even if hvd.rank() % 2 == 0 else odd
        got = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="ps.static", process_set=mine)
        assert got.item() == len(mine.ranks)
        assert hvd.global_process_set.ranks == list(range(hvd.size()))
        assert even.size() == len(even_ranks) and even.included() == (hvd.rank() % 2 == 0)
        hvd.barrier()  # as above, before the shutdown below
    finally:
        hvd.shutdown()
        hvd.init(process_sets="dynamic")
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="ps.after").item() == hvd.size()


def test_init_again_is_a_no_op_that_adopts_existing_sets():
    # Horovod's test suites call hvd.init() at the start of every test.
    hvd.init()
    hvd.init(process_sets="dynamic")
    mine = hvd.add_process_set([hvd.rank()] if hvd.size() == 1 else list(range(hvd.size() - 1)))
    try:
        again = hvd.ProcessSet(mine.ranks)
        hvd.init(process_sets=[again])
        assert again.process_set_id == mine.process_set_id
        with pytest.raises(ValueError, match="already initialized"):
            hvd.init(process_sets=[hvd.ProcessSet([hvd.size() - 1])])
    finally:
        hvd.remove_process_set(mine)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="ps.init.again").item() == hvd.size()
