"""CUDA tensors through kolo.torch: every collective against the same call
on CPU tensors, and DistributedOptimizer training on the GPU (default and
non-default stream) against the same training on the CPU. Skipped without
a CUDA device; scripts/gpu-check runs it at size 1 over NCCL and at size 2
over gloo staging (NCCL refuses two ranks on one GPU)."""
import os

import pytest
import torch

import kolo.torch as hvd
from conftest import ALL_TYPES, FLOAT_TYPES, contribution, tname

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA device: GPU tests run on a GPU machine via scripts/gpu-check")


NCCL = os.environ.get("KOLO_GPU_OPERATIONS", "nccl") == "nccl"


def test_cuda_int16_reduction_is_refused_on_nccl():
    if not NCCL:
        pytest.skip("KOLO_GPU_OPERATIONS is not nccl")
    with pytest.raises(ValueError, match="NCCL has no 16-bit integer type"):
        hvd.allreduce(torch.ones(3, dtype=torch.int16, device=device()), op=hvd.Sum,
                      name="g.int16")


def device():
    return torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())


def close(cpu, cuda, dtype):
    assert cuda.is_cuda
    tol = dict(rtol=1e-2, atol=1e-2) if dtype in (torch.float16, torch.bfloat16) else {}
    torch.testing.assert_close(cuda.cpu().double(), cpu.double(), **tol)


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=tname)
def test_cuda_collectives_match_the_cpu(dtype):
    n, me = hvd.size(), hvd.rank()
    t = contribution(me, dtype, (2 * n + 1, 3))
    g = t.to(device())
    k = tname(dtype)
    for op, name in ((hvd.Sum, "sum"), (hvd.Min, "min"), (hvd.Max, "max")):
        if dtype == torch.int16 and NCCL:
            continue  # refused at enqueue (test_cuda_int16_reduction_is_refused_on_nccl)
        close(hvd.allreduce(t, op=op, name="c.ar.%s.%s" % (name, k)),
              hvd.allreduce(g, op=op, name="g.ar.%s.%s" % (name, k)), dtype)
    if dtype in FLOAT_TYPES:
        close(hvd.allreduce(t, name="c.avg." + k), hvd.allreduce(g, name="g.avg." + k), dtype)
        close(hvd.allreduce(t, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0,
                            name="c.sc." + k),
              hvd.allreduce(g, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0,
                            name="g.sc." + k), dtype)
    close(hvd.broadcast(t, n - 1, name="c.bc." + k), hvd.broadcast(g, n - 1, name="g.bc." + k),
          dtype)
    rows = contribution(me, dtype, (me + 1, 3))
    close(hvd.allgather(rows, name="c.ag." + k), hvd.allgather(rows.to(device()), name="g.ag." + k),
          dtype)
    even = contribution(me, dtype, (2 * n, 3))
    close(hvd.alltoall(even, name="c.a2a." + k),
          hvd.alltoall(even.to(device()), name="g.a2a." + k), dtype)
    if dtype != torch.bool and not (dtype == torch.int16 and NCCL):
        close(hvd.reducescatter(t, op=hvd.Sum, name="c.rs." + k),
              hvd.reducescatter(g, op=hvd.Sum, name="g.rs." + k), dtype)


def test_cuda_grouped_allreduce_fuses_many_tensors():
    n = hvd.size()
    ts = [torch.full((1 + (i * 37) % 500,), float(hvd.rank() + i), device=device())
          for i in range(120)]
    out = hvd.grouped_allreduce(ts, op=hvd.Sum, name="g.grouped")
    for i, o in enumerate(out):
        assert o.is_cuda
        assert torch.equal(o.cpu(), torch.full(o.shape, float(n * i + n * (n - 1) / 2)))


def train(dev, side_stream):
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    model.to(dev)
    if side_stream:
        torch.cuda.synchronize()  # the parameters are ready before the side stream uses them
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    torch.manual_seed(9)
    stream = torch.cuda.Stream() if side_stream else None
    for _ in range(5):
        x = torch.randn(4 * hvd.size(), 8)[4 * hvd.rank():4 * hvd.rank() + 4]
        y = torch.randn(4 * hvd.size(), 1)[4 * hvd.rank():4 * hvd.rank() + 4]
        with torch.cuda.stream(stream) if stream is not None else _Null():
            # Everything of the step on the side stream, the copies included.
            x, y = x.to(dev), y.to(dev)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    torch.cuda.synchronize()
    return [p.detach().cpu() for p in model.parameters()]


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@pytest.mark.parametrize("side_stream", [False, True], ids=["default_stream", "side_stream"])
def test_cuda_distributed_optimizer_trains_as_on_the_cpu(side_stream):
    cpu = train(torch.device("cpu"), False)
    gpu = train(device(), side_stream)
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


def test_synchronize_returns_before_the_gpu_is_done():
    """Two-stage handles: synchronize() makes the current stream wait on the
    response's done event and returns once the work is enqueued, while the
    GPU is still busy with the input's producer; the values read afterwards
    (which waits for the stream) are right. Over NCCL only: staging copies
    through the host, which waits for the GPU by design."""
    if not NCCL:
        pytest.skip("KOLO_GPU_OPERATIONS is not nccl: staging waits for the GPU")
    n = hvd.size()
    x = torch.ones(1 << 20, device=device())
    # Every kernel of the test runs once before the GPU is kept busy: under
    # CUDA's lazy module loading a kernel's first launch loads it, and that
    # waits for the busy GPU on the host (an H200 showed 0.54 s in x.mul_),
    # which would look like kolo waiting.
    x.mul_(2.0)
    hvd.synchronize(hvd.allreduce_async(x, op=hvd.Sum, name="g.twostage.warm"))
    x.fill_(1.0)
    torch.cuda.synchronize()
    # Keep the current stream busy for a while (~0.5 s at ~1-2 GHz), then
    # produce the input behind that.
    torch.cuda._sleep(1 << 30)
    x.mul_(2.0)
    h = hvd.allreduce_async(x, op=hvd.Sum, name="g.twostage")
    out = hvd.synchronize(h)
    assert not torch.cuda.current_stream().query(), \
        "synchronize() waited for the GPU instead of handing the wait to the stream"
    assert torch.equal(out.cpu(), torch.full((1 << 20,), 2.0 * n))


def test_optimizer_step_waits_on_the_stream_not_the_host():
    if not NCCL:
        pytest.skip("KOLO_GPU_OPERATIONS is not nccl: staging waits for the GPU")
    torch.manual_seed(3)
    model = torch.nn.Linear(256, 256).to(device())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x = torch.ones(8, 256, device=device())
    # One whole step first: every kernel (cuBLAS's included) is loaded
    # before the GPU is kept busy (see the test above).
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
    torch.cuda.synchronize()
    before = model.weight.detach().clone()
    torch.cuda._sleep(1 << 30)
    model(x).sum().backward()
    grad = model.weight.grad.detach().clone()  # this rank's gradient (identical on every rank)
    opt.step()
    assert not torch.cuda.current_stream().query(), "step() waited for the GPU"
    torch.testing.assert_close(model.weight.detach(), before - 0.1 * grad)


def test_kolo_operations_are_refused_during_cuda_graph_capture():
    """A ready event recorded while the current stream captures a CUDA graph
    would pull kolo's comm stream into the capture (and the background
    thread's synchronizing calls would invalidate it): kolo refuses, with an
    error saying what to do, and the capture stays valid."""
    dev = device()
    x = torch.ones(8, device=dev)
    model = torch.nn.Linear(8, 1).to(dev)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        y = x * 2  # warm up the kernel outside the capture
        with torch.cuda.graph(graph, stream=stream):
            y = x * 2
            with pytest.raises(ValueError, match="capturing a CUDA graph.*outside graph capture"):
                hvd.allreduce_async(y, name="g.capture")
            with pytest.raises(ValueError, match="capturing a CUDA graph"):
                hvd.grouped_allreduce_async([y, y + 1], name="g.capture.grouped")
    graph.replay()  # the capture was not invalidated
    torch.cuda.synchronize()
    assert torch.equal(y.cpu(), torch.full((8,), 2.0))
    # Outside the capture the same operations run, and so does the optimizer.
    torch.testing.assert_close(hvd.allreduce(x, name="g.capture.after").cpu(), x.cpu())
    model(x).sum().backward()
    opt.step()
