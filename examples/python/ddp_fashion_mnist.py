"""Fashion-MNIST trained with PyTorch's DistributedDataParallel, on kolo's
torch.distributed backend. Nothing here is kolo's API: importing kolo.torch
registers the "kolo" backend, and the rest is a plain DDP program, which
runs on gloo (or nccl) by changing the backend string alone.

    kolorun -np 2 python3 examples/python/ddp_fashion_mnist.py [--epochs 1] [--backend kolo]
    torchrun --nproc-per-node 2 examples/python/ddp_fashion_mnist.py

Each rank reads its shard through a DistributedSampler; rank 0 saves a
checkpoint after every epoch (--checkpoint FILE) and prints the loss, the
test accuracy and a checksum of the parameters, which is the same for
every backend (up to float rounding) for the same seeds.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import kolo.torch  # noqa: F401  (registers the "kolo" backend)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import Net, load  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="kolo", help="kolo, gloo, nccl, cpu:kolo,cuda:nccl ...")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--limit", type=int, default=0, help="training images per rank (0: all)")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--checkpoint", default="")
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) \
        if torch.cuda.is_available() and "nccl" in args.backend else torch.device("cpu")

    x, y = load(args.data, "train")
    train = torch.utils.data.TensorDataset(x, y)
    sampler = torch.utils.data.distributed.DistributedSampler(train, seed=0)
    if args.limit:
        train = torch.utils.data.Subset(train, range(args.limit * size))
        sampler = torch.utils.data.distributed.DistributedSampler(train, seed=0)
    loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    tx, ty = load(args.data, "t10k")

    torch.manual_seed(0)
    model = DDP(Net().to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        start, total, batches = time.time(), 0.0, 0
        for data, target in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data.to(device)), target.to(device))
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
        mean = torch.tensor([total / max(batches, 1)], device=device)
        dist.all_reduce(mean)
        model.eval()
        with torch.no_grad():
            accuracy = (model(tx.to(device)).argmax(1).cpu() == ty).float().mean().item()
        if rank == 0 and args.checkpoint:
            torch.save({"epoch": epoch, "model": model.module.state_dict(),
                        "optimizer": optimizer.state_dict()}, args.checkpoint)
        dist.barrier()
        checksum = sum(p.double().sum().item() for p in model.parameters())
        if rank == 0:
            print("epoch %d: loss %.4f, test accuracy %.2f%%, %.1f s, backend %s, "
                  "parameter checksum %.6f" % (epoch, mean.item() / size, 100 * accuracy,
                                               time.time() - start, args.backend, checksum),
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
