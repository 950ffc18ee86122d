"""A Horovod PyTorch script using process sets, grouped ops, sparse
embeddings, Adasum and SyncBatchNorm; only the import differs from
horovod.torch. It trains a small recommender-style model on Fashion-MNIST
(an embedding per pixel-intensity bucket, a SyncBatchNorm'd MLP) and checks
the results every rank must agree on.

    kolorun -np 2 /usr/bin/python3 examples/python/horovod_features.py [--steps 30]

Exits non-zero (with a message) if any check fails.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

import kolo.torch as hvd  # was: import horovod.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import load  # noqa: E402  (the IDX reader)


class Model(torch.nn.Module):
    """Pixels bucketed into 16 intensities, embedded (sparse gradients), then
    a SyncBatchNorm'd MLP."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.EmbeddingBag(16 * 49, 16, mode="mean", sparse=True)
        self.fc1 = torch.nn.Linear(16, 64)
        self.bn = hvd.SyncBatchNorm(64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        # x: (B, 1, 28, 28) normalised; 7x7 pooled cells, each a bucket id.
        cells = F.avg_pool2d(x, 4).flatten(1)  # (B, 49)
        buckets = ((cells - cells.min()) / (cells.max() - cells.min() + 1e-6) * 15).long()
        ids = buckets + 16 * torch.arange(49)
        return self.fc2(F.relu(self.bn(self.fc1(self.embed(ids)))))


def check(ok, what):
    if not ok:
        raise SystemExit("horovod_features: rank %d: %s" % (hvd.rank(), what))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    torch.set_num_threads(1)

    # A process set of the even ranks, added after init (as dynamic sets are).
    hvd.init()
    even = hvd.add_process_set([r for r in range(hvd.size()) if r % 2 == 0])
    mine = even if even.included() else None
    if mine is not None:
        total = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, name="members", process_set=mine)
        check(int(total.item()) == even.size(), "allreduce over the even ranks")

    x, y = load(args.data, "train")
    n = args.steps * args.batch_size
    part = slice(hvd.rank() * n, (hvd.rank() + 1) * n)
    x, y = x[part], y[part]

    torch.manual_seed(0)
    model = Model()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    dense = [p for name, p in model.named_parameters() if not name.startswith("embed")]
    # Sparse embedding gradients through SparseAdam; dense ones through SGD
    # with Adasum, each with its own DistributedOptimizer.
    sparse_opt = hvd.DistributedOptimizer(
        torch.optim.SparseAdam(list(model.embed.parameters()), lr=0.01),
        named_parameters=model.embed.named_parameters(prefix="embed"))
    dense_opt = hvd.DistributedOptimizer(
        torch.optim.SGD(dense, lr=0.05, momentum=0.9),
        named_parameters=[(n, p) for n, p in model.named_parameters()
                          if not n.startswith("embed")],
        op=hvd.Adasum)
    hvd.broadcast_optimizer_state(dense_opt, root_rank=0)

    first = last = None
    for step in range(args.steps):
        xb = x[step * args.batch_size:(step + 1) * args.batch_size]
        yb = y[step * args.batch_size:(step + 1) * args.batch_size]
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
        avg = hvd.allreduce(loss.detach(), name="loss")
        first = avg.item() if first is None else first
        last = avg.item()

    # Grouped ops: every rank's parameters gathered in one negotiation.
    flat = [p.detach().reshape(-1) for p in model.parameters()]
    gathered = hvd.grouped_allgather(flat, name="params")
    for g, p in zip(gathered, flat):
        rows = g.reshape(hvd.size(), -1)
        check(all(torch.equal(rows[0], r) for r in rows), "parameters differ between ranks")
    sums = hvd.grouped_allreduce([torch.ones(3), torch.ones(2)], op=hvd.Sum, name="g")
    check(all(torch.equal(s, torch.full_like(s, hvd.size())) for s in sums), "grouped_allreduce")
    check(last < first, "loss did not go down (%.4f -> %.4f)" % (first, last))
    hvd.remove_process_set(even)
    if hvd.rank() == 0:
        print("horovod_features: %d ranks, loss %.4f -> %.4f, parameters identical"
              % (hvd.size(), first, last))
    hvd.shutdown()


if __name__ == "__main__":
    main()
