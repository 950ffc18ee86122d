"""One rank of a launch test (test_launch.py starts it the way each launcher
would): joins a "kolo" process group by the given method, checks one
all_reduce and prints "ok <rank> <world size> <sum>".

    python worker.py env|tcp://...|file://...|spawn|slurm|mixed|mesh|dead-peer|timeline|hvd
                     |hvd-fail-once|hvd-killed-peer

hvd: no process group; the Horovod API (kolo.torch) from the launcher's
environment instead, with the same check. hvd-fail-once: the same, but
rank 1 of torchrun's first attempt exits right after init().
hvd-killed-peer: rank 1 is SIGKILLed while rank 0 waits for it; rank 0
prints "failed after <s> s: <kolo's error>".
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import kolo.torch  # noqa: F401  (registers "kolo")


def check(rank, size, group=None, backend_check=None):
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t, group=group)
    expected = size * (size + 1) / 2
    assert torch.equal(t, torch.full((3,), expected)), (t, expected)
    print("ok %d %d %g" % (rank, size, t[0].item()), flush=True)


def run(method, rank=None, size=None):
    if method in ("hvd", "hvd-fail-once"):
        hvd = kolo.torch
        hvd.init()
        if (method == "hvd-fail-once" and hvd.rank() == 1
                and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"):
            # The first attempt's rank 1 dies after init(), before the
            # collective its peer waits in: torchrun must restart both.
            print("rank 1 fails on purpose (attempt 0)", flush=True)
            os._exit(3)
        t = hvd.allreduce(torch.full((3,), float(hvd.rank() + 1)), op=hvd.Sum, name="check")
        expected = hvd.size() * (hvd.size() + 1) / 2
        assert torch.equal(t, torch.full((3,), expected)), (t, expected)
        print("ok %d %d %g" % (hvd.rank(), hvd.size(), t[0].item()), flush=True)
        hvd.shutdown()
        return
    if method == "hvd-killed-peer":
        # Rank 1 is SIGKILLed (as by the OOM killer) while rank 0 waits for
        # it in an allreduce: rank 0's error must name it, in bounded time.
        hvd = kolo.torch
        hvd.init()
        hvd.allreduce(torch.ones(3), name="before")
        if hvd.rank() == 1:
            time.sleep(1)
            os.kill(os.getpid(), 9)
        began = time.monotonic()
        try:
            hvd.allreduce(torch.ones(3), name="after")
        except Exception as e:  # noqa: BLE001 (kolo's error, whatever its class)
            print("failed after %.1f s: %s" % (time.monotonic() - began, e), flush=True)
            os._exit(0)
        print("no error", flush=True)
        os._exit(1)
    if method == "env":
        dist.init_process_group("kolo")
    elif method.startswith(("tcp://", "file://")):
        dist.init_process_group("kolo", init_method=method, rank=rank, world_size=size)
    elif method == "slurm":
        # As a Slurm batch script does: the task's place from SLURM_*.
        dist.init_process_group("kolo", rank=int(os.environ["SLURM_PROCID"]),
                                world_size=int(os.environ["SLURM_NTASKS"]))
    elif method == "mixed":
        dist.init_process_group("cpu:kolo,cuda:gloo")
        backend = dist.get_backend()
        print("backend", backend, flush=True)
    elif method == "mesh":
        from torch.distributed.device_mesh import init_device_mesh
        dist.init_process_group("kolo")
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        check(dist.get_rank(), dist.get_world_size(), group=mesh.get_group())
        dist.destroy_process_group()
        return
    elif method == "timeline":
        kolo.torch.init()  # kolo.torch's engine beside the group, with a timeline of its own
        kolo.torch.allreduce(torch.ones(1), name="beside")
        dist.init_process_group("kolo")
        for _ in range(3):
            check(dist.get_rank(), dist.get_world_size())
        dist.broadcast(torch.zeros(2), src=0)
        dist.destroy_process_group()
        return
    elif method == "dead-peer":
        dist.init_process_group("kolo", timeout=datetime.timedelta(seconds=600))
        check(dist.get_rank(), dist.get_world_size())
        if dist.get_rank() == 1:
            time.sleep(1)
            os._exit(0)  # gone without a word, as a crashed process is
        began = time.monotonic()
        try:
            dist.all_reduce(torch.ones(4))
        except RuntimeError as e:
            print("failed after %.1f s: %s" % (time.monotonic() - began, e), flush=True)
            os._exit(0)
        print("no error", flush=True)
        os._exit(1)
    else:
        raise SystemExit("unknown method " + method)
    check(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()


def spawned(rank, size, url):
    run(url, rank, size)


if __name__ == "__main__":
    torch.set_num_threads(1)
    method = sys.argv[1]
    if method == "spawn":
        import torch.multiprocessing as mp
        url = sys.argv[2]
        mp.spawn(spawned, args=(2, url), nprocs=2, join=True)
    elif len(sys.argv) > 2:
        run(method, int(sys.argv[2]), int(sys.argv[3]))
    else:
        run(method)
