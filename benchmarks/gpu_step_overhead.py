"""Step time of one training step at size 1 on one GPU, side by side in one
run: plain PyTorch, kolo.torch's DistributedOptimizer (NCCL) and PyTorch
DDP (NCCL, world size 1). The three variants train copies of one model and
are timed in interleaved rounds (each round times every variant once), so
drift of the machine hits all three alike; the median round is reported.

    kolorun -np 1 python3 benchmarks/gpu_step_overhead.py [--model resnet50]
        [--batch-size 64] [--image-size 224] [--rounds 7] [--steps 10]

Needs a CUDA device. Prints one line per variant and kolo's and DDP's
overhead over plain PyTorch (the issue's goal: kolo <= 3%).
"""
import argparse
import copy
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import kolo.torch as hvd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples", "python"))
from pytorch_synthetic_benchmark import resnet  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet50", choices=["resnet18", "resnet50"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10, help="steps per variant per round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-ddp", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_step_overhead: no CUDA device; run it on a GPU machine (scripts/gpu-check)")
        return 77
    hvd.init()
    if hvd.size() != 1:
        print("gpu_step_overhead measures size 1: run it with kolorun -np 1")
        return 2
    dev = torch.device("cuda", hvd.local_rank())
    torch.cuda.set_device(dev)
    torch.manual_seed(0)
    base = resnet(args.model).to(dev)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=dev)
    target = torch.randint(0, 1000, (args.batch_size,), device=dev)

    variants = {}
    plain = copy.deepcopy(base)
    variants["plain PyTorch"] = (plain, torch.optim.SGD(plain.parameters(), lr=0.01))
    kmodel = copy.deepcopy(base)
    kopt = hvd.DistributedOptimizer(torch.optim.SGD(kmodel.parameters(), lr=0.01),
                                    named_parameters=kmodel.named_parameters())
    variants["kolo DistributedOptimizer"] = (kmodel, kopt)
    if not args.no_ddp:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % (29500 + os.getpid() % 1000),
                                rank=0, world_size=1)
        dmodel = DDP(copy.deepcopy(base), device_ids=[dev.index])
        variants["PyTorch DDP"] = (dmodel, torch.optim.SGD(dmodel.parameters(), lr=0.01))

    def run(model, opt, steps):
        for _ in range(steps):
            opt.zero_grad()
            F.cross_entropy(model(data), target).backward()
            opt.step()

    for model, opt in variants.values():
        run(model, opt, args.warmup)
    torch.cuda.synchronize()
    times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (model, opt) in variants.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            run(model, opt, args.steps)
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) * 1000.0 / args.steps)
    print("%s, batch %d, image %d, fp32, size 1, %s: median of %d rounds x %d steps" % (
        args.model, args.batch_size, args.image_size, torch.cuda.get_device_name(dev),
        args.rounds, args.steps))
    ref = statistics.median(times["plain PyTorch"])
    for name, t in times.items():
        med = statistics.median(t)
        extra = "" if name == "plain PyTorch" else "  overhead %+.1f%%" % (100.0 * (med / ref - 1))
        print("  %-26s %8.2f ms/step (min %.2f, max %.2f)%s" % (name, med, min(t), max(t), extra))
    if not args.no_ddp:
        dist.destroy_process_group()
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
