"""join with uneven numbers of batches per rank."""
import torch

import kolo.torch as hvd


def test_join_with_uneven_batches():
    n, r = hvd.size(), hvd.rank()
    batches = 2 + r  # rank r has 2 + r batches
    for k in range(batches):
        got = hvd.allreduce(torch.full((3,), float(10 * k + r + 1)), op=hvd.Sum,
                            name="join.step.%d" % k)
        # Ranks that ran out of batches contribute zeros.
        active = [s for s in range(n) if 2 + s > k]
        assert torch.equal(got, torch.full((3,), float(sum(10 * k + s + 1 for s in active))))
    last = hvd.join()
    assert last == n - 1  # the rank with the most batches joins last
    # Every rank is back in step afterwards.
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="join.after").item() == n


def test_join_with_allgather_and_broadcast():
    n, r = hvd.size(), hvd.rank()
    if r == 0:
        last = hvd.join()
    else:
        got = hvd.allgather(torch.full((r, 2), float(r)), name="join.ag")
        assert got.shape[0] == sum(range(1, n))  # joined rank 0 contributes no rows
        b = hvd.broadcast(torch.full((2,), float(r)), 1, name="join.bc")
        assert torch.equal(b, torch.ones(2))
        last = hvd.join()
    assert hvd.broadcast_object(last, root_rank=0) == last


def test_training_with_uneven_batches_and_join():
    # Horovod's pattern: train on what this rank has, then join.
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for k in range(1 + hvd.rank()):
        opt.zero_grad()
        model(torch.ones(2, 4) * k).sum().backward()
        opt.step()
    hvd.join()
    hvd.barrier()
