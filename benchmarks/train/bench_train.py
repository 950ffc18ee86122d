"""Training step time of one model with kolo, without communication, with
PyTorch DDP and with Horovod: the same loop, model, batch and threads.

    # no communication (same launcher and number of processes as kolo)
    kolorun --start-timeout 0 -np 2 /usr/bin/python3 bench_train.py --model cnn --mode nocomm
    # kolo.torch (needs PYTHONPATH=<build>/python)
    kolorun -np 2 /usr/bin/python3 bench_train.py --model cnn --mode kolo
    # PyTorch DistributedDataParallel over gloo
    /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 bench_train.py --model cnn --mode ddp
    # the same DDP over kolo's torch.distributed backend ("kolo"; kolorun sets env://)
    kolorun -np 2 /usr/bin/python3 bench_train.py --model cnn --mode ddp-kolo
    # horovod.torch from build/peers/venv (install-horovod.sh)
    horovodrun -np 2 --gloo python bench_train.py --model cnn --mode horovod
    mpirun -np 2 --bind-to none python bench_train.py --model cnn --mode horovod

Synthetic data shaped like Fashion-MNIST (1x28x28, 10 classes), generated
once per rank. Models: `cnn` (two 3x3 convolutions and two linear layers,
about 0.8M parameters) and `mlp` (784-2400-2400-1024-10, about 10.1M).
SGD with momentum. Every rank times each step (zero_grad, forward,
backward, optimizer step; the communication of every mode has finished
when step() returns) and prints

    RANKSTEP rank=<r> step_ms=<median> mean_ms=<mean> p10_ms=.. p90_ms=..

and rank 0 also prints the machine-readable line

    RESULT model=<m> mode=<mode> np=<n> batch=<b> threads=<t> step_ms=<median> params=<count> backend=<b>

where step_ms is rank 0's median over the timed steps (the ranks of the
communicating modes run in lockstep; benchmarks/train/run.sh averages the
RANKSTEP medians of all ranks, which is what matters for nocomm). With
--phases every rank also prints

    PHASES rank=<r> zero_grad_ms=.. forward_ms=.. backward_ms=.. synchronize_ms=.. step_ms=..

(medians per phase; kolo and horovod then call synchronize() and step()
apart, so synchronize_ms is the wait for the reductions after backward).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


class Cnn(nn.Module):
    """Fashion-MNIST-sized CNN: 824,458 parameters."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)   # 28x28
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)  # 14x14
        self.fc1 = nn.Linear(64 * 7 * 7, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # 28 -> 14
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # 14 -> 7
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def mlp():
    """784-2400-2400-1024-10: 10,115,274 parameters."""
    return nn.Sequential(nn.Flatten(),
                         nn.Linear(784, 2400), nn.ReLU(),
                         nn.Linear(2400, 2400), nn.ReLU(),
                         nn.Linear(2400, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


def launch_rank():
    """This process's rank and the job size from whichever launcher started it."""
    for rank_var, size_var in (("KOLO_RANK", "KOLO_SIZE"), ("RANK", "WORLD_SIZE"),
                               ("HOROVOD_RANK", "HOROVOD_SIZE"),
                               ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                               ("PMI_RANK", "PMI_SIZE")):
        if rank_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ.get(size_var, "1"))
    return 0, 1


class Comm:
    """What each mode does around the plain training loop."""

    def __init__(self, mode):
        self.mode = mode
        self.hvd = None
        self.backend = "none"

    def init(self):
        if self.mode == "nocomm":
            self.rank, self.size = launch_rank()
        elif self.mode in ("kolo", "horovod"):
            if self.mode == "kolo":
                import kolo.torch as hvd
                self.backend = "gloo"
            else:
                import horovod.torch as hvd
            hvd.init()
            if self.mode == "horovod":
                self.backend = "mpi" if hvd.mpi_enabled() else "gloo"
            self.hvd = hvd
            self.rank, self.size = hvd.rank(), hvd.size()
        elif self.mode in ("ddp", "ddp-kolo"):
            import torch.distributed as dist
            if self.mode == "ddp-kolo":
                import kolo.torch  # noqa: F401  (registers the "kolo" backend)
            self.backend = "kolo" if self.mode == "ddp-kolo" else "gloo"
            dist.init_process_group(self.backend)
            self.rank, self.size = dist.get_rank(), dist.get_world_size()
        else:
            raise ValueError(self.mode)

    def wrap(self, model, optimizer, bucket_mb=None):
        """The model and optimizer to train with; all ranks start from rank 0's weights.

        bucket_mb: gradient bucket size in MiB for kolo's DistributedOptimizer
        and DDP (None: each one's default, 25); Horovod has no buckets.
        """
        if self.mode in ("kolo", "horovod"):
            if bucket_mb is not None and self.mode == "kolo":
                import kolo.torch.optimizer
                kolo.torch.optimizer.BUCKET_BYTES = int(bucket_mb * (1 << 20))
            self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            optimizer = self.hvd.DistributedOptimizer(
                optimizer, named_parameters=model.named_parameters())
        elif self.mode in ("ddp", "ddp-kolo"):
            # Broadcasts rank 0's weights.
            model = nn.parallel.DistributedDataParallel(
                model, **({} if bucket_mb is None else {"bucket_cap_mb": bucket_mb}))
        return model, optimizer

    def gather(self, value):
        """value from every rank (rank order), or [value] without communication."""
        if self.mode in ("kolo", "horovod"):
            return self.hvd.allgather(torch.tensor([value], dtype=torch.float64),
                                      name="bench.gather").tolist()
        if self.mode in ("ddp", "ddp-kolo"):
            import torch.distributed as dist
            out = [torch.zeros(1, dtype=torch.float64) for _ in range(self.size)]
            dist.all_gather(out, torch.tensor([value], dtype=torch.float64))
            return [t.item() for t in out]
        return [value]

    def shutdown(self):
        if self.hvd is not None:
            self.hvd.shutdown()
        elif self.mode in ("ddp", "ddp-kolo"):
            # Debian's torch 1.13 on Python 3.11 can deadlock in ProcessGroupGloo's
            # destructor at interpreter exit (the destructor holds the GIL while a
            # gloo worker thread waits for it to free a tensor); skip the teardown.
            import torch.distributed as dist
            dist.barrier()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    parser.add_argument("--mode", choices=["nocomm", "kolo", "ddp", "ddp-kolo", "horovod"],
                        default="nocomm")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--steps", type=int, default=60, help="timed steps")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--bucket-mb", type=float, default=None,
                        help="gradient bucket size in MiB (kolo and DDP; default: theirs, 25)")
    parser.add_argument("--phases", action="store_true",
                        help="also time each phase of a step (zero_grad, forward, backward, "
                             "kolo/horovod: synchronize, then the optimizer's step) and print "
                             "a PHASES line per rank with their medians")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set by an earlier parallel call
    comm = Comm(args.mode)
    comm.init()
    rank, size = comm.rank, comm.size

    torch.manual_seed(0)
    model = Cnn() if args.model == "cnn" else mlp()
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    model, optimizer = comm.wrap(model, optimizer, args.bucket_mb)

    generator = torch.Generator().manual_seed(1000 + rank)
    data = torch.randn(args.batch_size, 1, 28, 28, generator=generator)
    target = torch.randint(0, 10, (args.batch_size,), generator=generator)

    if rank == 0:
        print("model %s (%d parameters), mode %s, %d ranks, batch %d per rank, %d thread(s)%s"
              % (args.model, params, args.mode, size, args.batch_size, args.threads,
                 "" if args.bucket_mb is None else ", buckets of %g MiB" % args.bucket_mb),
              flush=True)

    times = []
    phase_names = ("zero_grad", "forward", "backward", "synchronize", "step")
    phases = {name: [] for name in phase_names}
    split = args.phases and comm.hvd is not None  # synchronize() apart from step()
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        t_zero = time.perf_counter()
        loss = F.cross_entropy(model(data), target)
        t_fwd = time.perf_counter()
        loss.backward()
        t_bwd = time.perf_counter()
        if split:
            optimizer.synchronize()
            t_sync = time.perf_counter()
            with optimizer.skip_synchronize():
                optimizer.step()
        else:
            t_sync = t_bwd
            optimizer.step()
        end = time.perf_counter()
        if i >= args.warmup:
            times.append(1000.0 * (end - start))
            for name, (a, b) in zip(phase_names, ((start, t_zero), (t_zero, t_fwd),
                                                  (t_fwd, t_bwd), (t_bwd, t_sync), (t_sync, end))):
                phases[name].append(1000.0 * (b - a))
    if not all(torch.isfinite(p).all() for p in model.parameters()):
        print("rank %d: parameters are not finite" % rank, file=sys.stderr)
        sys.exit(1)

    ordered = sorted(times)
    median = statistics.median(ordered)
    print("RANKSTEP rank=%d step_ms=%.3f mean_ms=%.3f p10_ms=%.3f p90_ms=%.3f loss=%.4f"
          % (rank, median, statistics.fmean(ordered), percentile(ordered, 0.1),
             percentile(ordered, 0.9), loss.item()), flush=True)
    if args.phases:
        print("PHASES rank=%d %s" % (rank, " ".join(
            "%s_ms=%.2f" % (name, statistics.median(v)) for name, v in phases.items())),
            flush=True)
    medians = comm.gather(median)
    if rank == 0:
        print("RESULT model=%s mode=%s np=%d batch=%d threads=%d step_ms=%.3f params=%d backend=%s"
              " rank_step_ms=%s" % (args.model, args.mode, size, args.batch_size, args.threads,
                                    median, params, comm.backend,
                                    ",".join("%.3f" % m for m in medians)), flush=True)
    comm.shutdown()


if __name__ == "__main__":
    main()
