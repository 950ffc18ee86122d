"""An installed kolo.torch, end to end: run under kolorun with the package
under test first on sys.path.

    kolorun -np 2 python tests/package/smoke.py

Checks that kolo is imported from where it was installed (KOLO_EXPECT_DIR,
when set), a sum allreduce, then a few steps of the Fashion-MNIST example's
CNN on real data with DistributedOptimizer after broadcast_parameters: the
parameters must stay bitwise identical on every rank and the loss must go
down; then an all_reduce on torch.distributed's "kolo" backend, and that
kolo.run's cloudpickle came with the package. Prints "smoke ok" on each
rank."""
import os
import sys

import torch
import torch.nn.functional as F

import kolo.torch as hvd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "python"))
from fashion_mnist import Net, load  # noqa: E402

expect_dir = os.environ.get("KOLO_EXPECT_DIR")
if expect_dir:
    where = os.path.realpath(os.path.dirname(hvd.__file__))
    assert where.startswith(os.path.realpath(expect_dir) + os.sep), (
        "kolo imported from %s, not from %s" % (where, expect_dir))

hvd.init()
rank, size = hvd.rank(), hvd.size()
out = hvd.allreduce(torch.ones(3) * (rank + 1), op=hvd.Sum, name="smoke.allreduce")
assert out.tolist() == [float(sum(range(1, size + 1)))] * 3, out

torch.manual_seed(rank)  # different on purpose: broadcast_parameters must fix it
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * size, momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

x, y = load(os.environ.get("KOLO_FASHION_MNIST", "/usr/share/datasets/fashion-mnist"), "t10k")
x, y = x[rank::size][:640], y[rank::size][:640]
losses = []
for step in range(10):
    xb, yb = x[step * 64:(step + 1) * 64], y[step * 64:(step + 1) * 64]
    optimizer.zero_grad()
    loss = F.cross_entropy(model(xb), yb)
    loss.backward()
    optimizer.step()
    losses.append(hvd.allreduce(loss.detach(), name="smoke.loss.%d" % step).item())

flat = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = hvd.allgather(flat.unsqueeze(0), name="smoke.params")
assert all(torch.equal(gathered[0], gathered[r]) for r in range(size)), "parameters differ"
assert sum(losses[-3:]) < sum(losses[:3]), "loss did not go down: %s" % losses
# The c10d backend of the installed package: torch.distributed on "kolo",
# through the env:// variables kolorun sets.
import torch.distributed as dist  # noqa: E402

dist.init_process_group("kolo")
t = torch.full((2,), float(rank + 1))
dist.all_reduce(t)
assert t.tolist() == [float(sum(range(1, size + 1)))] * 2, t
dist.destroy_process_group()
# kolo.run's pickler, a dependency of the package (pip installed it).
import cloudpickle  # noqa: E402,F401
import kolo.runner._job  # noqa: E402,F401

print("rank %d of %d: smoke ok (torch %s, kolo from %s, loss %.3f -> %.3f)"
      % (rank, size, torch.__version__, os.path.dirname(hvd.__file__), losses[0], losses[-1]))
hvd.shutdown()
