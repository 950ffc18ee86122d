"""Synthetic-data training throughput with kolo.torch, mirroring Horovod's
pytorch_synthetic_benchmark.py (and examples/synthetic_benchmark in C++).

    kolorun -np 2 /usr/bin/python3 examples/python/pytorch_synthetic_benchmark.py \
        --batch-size 16 --image-size 64

torchvision is not needed: ResNet-18/50 are defined below, with the same
layout as examples/synthetic_benchmark/resnet.cc. --no-kolo runs the same
loop without communication (the single-rank baseline).
"""
import argparse
import timeit

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import kolo.torch as hvd


def conv(cin, cout, k, stride=1):
    return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)


class Block(nn.Module):
    def __init__(self, cin, width, stride, bottleneck):
        super().__init__()
        cout = width * 4 if bottleneck else width
        if bottleneck:
            self.body = nn.Sequential(conv(cin, width, 1), nn.BatchNorm2d(width), nn.ReLU(),
                                      conv(width, width, 3, stride), nn.BatchNorm2d(width),
                                      nn.ReLU(), conv(width, cout, 1), nn.BatchNorm2d(cout))
        else:
            self.body = nn.Sequential(conv(cin, width, 3, stride), nn.BatchNorm2d(width),
                                      nn.ReLU(), conv(width, cout, 3), nn.BatchNorm2d(cout))
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.shortcut is None else self.shortcut(x)
        return F.relu(self.body(x) + identity)


def resnet(name, num_classes=1000):
    layers, bottleneck = {"resnet18": ([2, 2, 2, 2], False),
                          "resnet50": ([3, 4, 6, 3], True)}[name]
    mods = [nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1)]
    cin = 64
    for stage, (blocks, width) in enumerate(zip(layers, [64, 128, 256, 512])):
        for b in range(blocks):
            mods.append(Block(cin, width, 2 if (b == 0 and stage > 0) else 1, bottleneck))
            cin = width * 4 if bottleneck else width
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*mods)


def main():
    parser = argparse.ArgumentParser(description="kolo.torch synthetic benchmark")
    parser.add_argument("--model", default="resnet18", choices=["resnet18", "resnet50"])
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-warmup-batches", type=int, default=10)
    parser.add_argument("--num-batches-per-iter", type=int, default=10)
    parser.add_argument("--num-iters", type=int, default=10)
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--no-kolo", action="store_true", help="no communication at all")
    parser.add_argument("--num-threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()

    torch.set_num_threads(args.num_threads)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    device = torch.device("cuda", hvd.local_rank()) if torch.cuda.is_available() else "cpu"

    torch.manual_seed(0)
    model = resnet(args.model).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if not args.no_kolo:
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(),
            compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    target = torch.randint(0, 1000, (args.batch_size,), device=device)

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    if rank == 0:
        print("model %s, batch %d, image %dx%d, %d ranks, %s" % (
            args.model, args.batch_size, args.image_size, args.image_size, size,
            "no communication" if args.no_kolo else "kolo"), flush=True)
    timeit.timeit(step, number=args.num_warmup_batches)
    rates = []
    for it in range(args.num_iters):
        seconds = timeit.timeit(step, number=args.num_batches_per_iter)
        rates.append(args.batch_size * args.num_batches_per_iter / seconds)
        if rank == 0:
            print("iter %d: %.2f img/s per rank" % (it, rates[-1]), flush=True)
    mean, conf = np.mean(rates), 1.96 * np.std(rates)
    if rank == 0:
        print("img/s per rank: %.2f +- %.2f" % (mean, conf))
        print("total img/s on %d ranks: %.2f +- %.2f" % (size, mean * size, conf * size))
        print("step time: %.2f ms" % (1000.0 * args.batch_size / mean), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
