"""The "kolo" torch.distributed backend on CUDA tensors (scripts/gpu-check
runs it on a GPU machine; it exits 77 without a GPU):

    kolorun -np 1 python3 tests/c10d/cuda_check.py                    # NCCL
    KOLO_GPU_OPERATIONS=gloo kolorun -np 2 python3 tests/c10d/cuda_check.py   # host staging

Each collective on CUDA tensors is checked against the value computed from
every rank's inputs; then SyncBatchNorm (GPU-only in torch) on the kolo
group against BatchNorm over the combined batch, and a few DDP steps.
Prints "cuda check ok" on every rank.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import kolo.torch  # noqa: F401  (registers "kolo")


def expect(got, want, what):
    if not torch.allclose(got.float().cpu(), want.float().cpu(), rtol=1e-4, atol=1e-4):
        raise SystemExit("cuda check: %s: got %s, expected %s" % (what, got, want))


def main():
    if not torch.cuda.is_available():
        print("cuda check: no CUDA device")
        return 77
    dist.init_process_group("kolo")
    rank, size = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
    torch.cuda.set_device(dev)

    def mine(r, n=6):
        return torch.arange(n, dtype=torch.float32, device=dev) + 10 * r

    total = sum(mine(r) for r in range(size))
    t = mine(rank)
    dist.all_reduce(t)
    expect(t, total, "all_reduce")
    t = mine(rank)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    expect(t, total / size, "all_reduce AVG")
    t = mine(rank)
    dist.broadcast(t, src=size - 1)
    expect(t, mine(size - 1), "broadcast")
    out = torch.empty(size * 6, device=dev)
    dist.all_gather_into_tensor(out, mine(rank))
    expect(out, torch.cat([mine(r) for r in range(size)]), "all_gather_into_tensor")
    outs = [torch.empty(6, device=dev) for _ in range(size)]
    dist.all_gather(outs, mine(rank))
    expect(torch.cat(outs), torch.cat([mine(r) for r in range(size)]), "all_gather")
    rs = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(rs, mine(rank, 2 * size))
    expect(rs, sum(mine(r, 2 * size) for r in range(size))[2 * rank:2 * rank + 2],
           "reduce_scatter_tensor")
    a2a = torch.empty(size, device=dev)
    dist.all_to_all_single(a2a, mine(rank, size))
    expect(a2a, torch.tensor([mine(r, size)[rank].item() for r in range(size)]), "all_to_all_single")
    if size > 1:
        x = torch.empty(6, device=dev)
        reqs = [dist.isend(mine(rank), (rank + 1) % size), dist.irecv(x, (rank - 1) % size)]
        for req in reqs:
            req.wait()
        expect(x, mine((rank - 1) % size), "isend/irecv")
    fut = dist.all_reduce(mine(rank), async_op=True).get_future()
    expect(fut.wait()[0], total, "get_future")

    # SyncBatchNorm over the group against BatchNorm over the whole batch.
    torch.manual_seed(0)
    full = torch.randn(4 * size, 3, 5, 5, device=dev)
    sbn = nn.SyncBatchNorm(3).to(dev)
    bn = nn.BatchNorm2d(3).to(dev)
    part = full[4 * rank:4 * rank + 4].clone().requires_grad_()
    whole = full.clone().requires_grad_()
    sbn(part).sum().backward()
    bn(whole).sum().backward()
    expect(sbn.running_mean, bn.running_mean, "SyncBatchNorm running mean")
    expect(part.grad, whole.grad[4 * rank:4 * rank + 4], "SyncBatchNorm input gradient")

    # A few DDP steps; every rank ends with the same parameters.
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 4).to(dev), device_ids=[dev.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        opt.zero_grad()
        model(torch.randn(5, 8, device=dev) + rank).sum().backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    low, high = flat.clone(), flat.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    expect(low, high, "DDP parameters on every rank")
    torch.cuda.synchronize()
    print("rank %d: cuda check ok (%d ranks, %s)" % (rank, size, torch.cuda.get_device_name(dev)))
    sys.stdout.flush()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
