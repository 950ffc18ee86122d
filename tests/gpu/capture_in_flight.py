"""A CUDA graph captured in global mode (torch.cuda.graph's default) on
the user's thread while kolo work is in flight: kolo's own threads poll
that work (event and stream queries) during the capture. CUDA prohibits
potentially unsafe calls from any thread while another thread captures in
global mode unless that thread switched itself to a thread-local or relaxed
capture mode; an unsafe call invalidates the capture, and capture_end then
raises. kolo's threads must not do that.

    KOLO_GPU_OPERATIONS=nccl kolorun -np 1 python3 tests/gpu/capture_in_flight.py

Exits 0 and prints "capture with kolo work in flight: ok" when the capture
stays valid, the graph replays right and kolo's result is right. Run by
scripts/gpu-check (at size 1 over NCCL and at size 2 over gloo staging)."""
import sys
import time

import torch

import kolo.torch as hvd

hvd.init()
dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
n = hvd.size()
x = torch.ones(1 << 20, device=dev)
hvd.allreduce(x, name="warm")  # connect before the capture
a = torch.arange(1024, dtype=torch.float32, device=dev)
side = torch.cuda.Stream(device=dev)
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    b = a * 2 + 1  # warm the kernels up outside the capture
side.synchronize()
torch.cuda.synchronize()

failures = []
for round_ in range(3):
    # kolo work in flight through the whole capture: its input's producer
    # keeps the GPU busy ~0.5 s, so the comm stream and kolo's fence stay
    # pending and kolo's threads poll them.
    torch.cuda._sleep(1 << 30)
    y = torch.full((1 << 20,), float(hvd.rank() + 1), device=dev)
    h = hvd.allreduce_async(y, op=hvd.Sum, name="inflight.%d" % round_)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=side):
            end = time.time() + 0.3
            while time.time() < end:
                b = b * 0 + a * 2 + 1
                time.sleep(0.005)
        graph.replay()
        side.synchronize()
        if not torch.equal(b.cpu(), (a * 2 + 1).cpu()):
            failures.append("round %d: the replayed graph computed wrong values" % round_)
    except Exception as e:  # the capture was invalidated
        failures.append("round %d: the capture failed: %s" % (round_, str(e).splitlines()[0]))
    try:
        out = hvd.synchronize(h)
        want = float(n * (n + 1) // 2)
        if not torch.equal(out.cpu(), torch.full((1 << 20,), want)):
            failures.append("round %d: kolo's allreduce is wrong" % round_)
    except Exception as e:
        failures.append("round %d: kolo's allreduce failed: %s" % (round_, str(e).splitlines()[0]))
        break
    torch.cuda.synchronize()

if failures:
    print("capture with kolo work in flight: FAILED\n  " + "\n  ".join(failures))
    sys.exit(1)
print("capture with kolo work in flight: ok (3 rounds, rank %d of %d)" % (hvd.rank(), n))
