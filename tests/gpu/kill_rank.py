"""A rank killed in the middle of CUDA allreduces: the survivor's pending
operation must fail in bounded time with an error naming the dead rank.

    KOLO_GPU_OPERATIONS=gloo KOLO_TIMEOUT=10 \
        kolorun --grace-seconds 30 -np 2 python3 tests/gpu/kill_rank.py

Rank 1 starts an allreduce and SIGKILLs itself; rank 0 ignores kolorun's
SIGTERM long enough to report "rank 0: error after X s: ..." and exits 0
when the error names rank 1 (kolorun itself exits non-zero: rank 1 was
killed). Run by scripts/gpu-check; NCCL refuses two ranks on one GPU, so
the one-GPU machine runs this over gloo staging."""
import os
import signal
import sys
import time

import torch

import kolo.torch as hvd

signal.signal(signal.SIGTERM, signal.SIG_IGN)
hvd.init()
t = torch.ones((64 << 20) // 4, device=torch.device("cuda", 0))
for i in range(100):
    if hvd.rank() == 1 and i == 3:
        hvd.allreduce_async(t, name="big.%d" % i)
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.time()
    try:
        hvd.allreduce(t, name="big.%d" % i)
    except Exception as e:  # noqa: BLE001 (any kolo error is the point)
        print("rank %d: error after %.1f s: %s" % (hvd.rank(), time.time() - start, e),
              flush=True)
        sys.exit(0 if "rank 1" in str(e) else 1)
print("rank %d: no error" % hvd.rank(), flush=True)
sys.exit(1)
