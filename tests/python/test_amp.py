"""The modern training loop through DistributedOptimizer: bf16 autocast with
AdamW, fp16 autocast with GradScaler (Horovod's synchronize / unscale_ /
clip / skip_synchronize recipe), gradient clipping, and a torch.compile'd
model. Each test trains the same steps with kolo and without it, and
compares:

- at size 1, kolo's result is identical (bitwise) to plain training;
- at size N, the reference is one process without kolo. Where the model
  runs in fp32 it trains on the concatenated N x batch. Under autocast it
  computes each rank's gradient on that rank's slice and averages them
  (what kolo's Average makes of them), since a bf16/fp16 gradient summed
  over N x batch rows rounds differently from N gradients over batch rows.
  Clipping and the GradScaler's unscale/inf check act on the averaged
  gradient in both.

Parametrized by device; cuda is skipped without a CUDA device, or when the
ranks of this host outnumber its GPUs over NCCL (it refuses two ranks on one
GPU: run those with KOLO_GPU_OPERATIONS=gloo).
"""
import importlib
import os

import pytest
import torch

import kolo.torch as hvd
from conftest import same_on_all_ranks

TORCH_VERSION = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
FEATURES, HIDDEN, OUT, ROWS = 8, 16, 4, 6
STEPS = 4


def _cuda_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA device: GPU tests run on a GPU machine via scripts/gpu-check"
    nccl = os.environ.get("KOLO_GPU_OPERATIONS", "nccl") == "nccl"
    if nccl and hvd.local_size() > torch.cuda.device_count():
        return ("%d ranks on this host share %d GPU(s) and NCCL refuses two ranks on one GPU "
                "(KOLO_GPU_OPERATIONS=gloo runs them)"
                % (hvd.local_size(), torch.cuda.device_count()))
    return None


_CUDA_SKIP = _cuda_skip_reason()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(_CUDA_SKIP is not None,
                                                                 reason=str(_CUDA_SKIP)))]


def device_of(kind):
    if kind == "cuda":
        return torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    return torch.device("cpu")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(FEATURES, HIDDEN)
        self.out = torch.nn.Linear(HIDDEN, OUT)

    def forward(self, x):
        return self.out(torch.tanh(self.inp(x)))


def make_model(device):
    torch.manual_seed(4321)
    return Net().to(device)


def batch(step, rank, device):
    g = torch.Generator().manual_seed(7919 * step + rank)
    x = torch.randn(ROWS, FEATURES, generator=g)
    y = torch.randn(ROWS, OUT, generator=g)
    return x.to(device), y.to(device)


def full_batch(step, device):
    parts = [batch(step, r, device) for r in range(hvd.size())]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def loss_fn(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def distributed(model, optimizer, tag):
    """model's parameters from rank 0, optimizer wrapped; names unique to tag
    (the tests reuse parameter shapes on other devices)."""
    named = [("%s.%s" % (tag, n), p) for n, p in model.named_parameters()]
    hvd.broadcast_parameters(named, root_rank=0)
    return hvd.DistributedOptimizer(optimizer, named_parameters=named)


def set_averaged_rank_gradients(model, step, device, backward):
    """p.grad = the mean over ranks of backward(model, rank's slice)'s
    gradient: what DistributedOptimizer's allreduce leaves there, in one
    process without kolo."""
    per_rank = []
    for r in range(hvd.size()):
        model.zero_grad(set_to_none=True)
        backward(model, *batch(step, r, device))
        per_rank.append([p.grad.clone() for p in model.parameters()])
    for i, p in enumerate(model.parameters()):
        p.grad = torch.stack([g[i] for g in per_rank]).sum(0) / hvd.size()


def assert_matches(model, ref, tag, rtol, atol, exact=True):
    """Bitwise equal to ref at size 1 (when exact), else within tolerance;
    the same on every rank; moved by training."""
    start = make_model(next(ref.parameters()).device)
    for (name, p), (_, q), (_, p0) in zip(model.named_parameters(), ref.named_parameters(),
                                          start.named_parameters()):
        assert same_on_all_ranks(p, "%s.same.%s" % (tag, name)), name
        if exact and hvd.size() == 1:
            assert torch.equal(p, q), "%s: max diff %g" % (name, (p - q).abs().max())
        else:
            torch.testing.assert_close(p, q, rtol=rtol, atol=atol, msg=name)
        assert not torch.equal(p, p0), "%s did not train" % name


def assert_series_match(got, want, what, rtol=1e-5, atol=1e-6):
    """Per-step values (gradients, norms): equal at size 1, close at size N.
    Adam and norm clipping hide a wrongly scaled gradient from the
    parameters; these catch it."""
    assert len(got) == len(want)
    if hvd.size() == 1:
        rtol = atol = 0.0  # exact; NaN matches NaN (overflowing fp16 steps)
    for step, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(torch.as_tensor(a), torch.as_tensor(b), rtol=rtol, atol=atol,
                                   equal_nan=True, msg="%s at step %d" % (what, step))


def flat_grad(model):
    return torch.cat([p.grad.detach().reshape(-1) for p in model.parameters()])


def autocast(device, dtype):
    return torch.autocast(device.type, dtype=dtype)


@pytest.mark.parametrize("kind", DEVICES)
def test_bf16_autocast_adamw(kind):
    device = device_of(kind)
    make_opt = lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1)  # noqa: E731

    def backward(model, x, y):
        with autocast(device, torch.bfloat16):
            out = model(x)
            assert out.dtype == torch.bfloat16
            loss = torch.nn.functional.mse_loss(out, y)
        loss.backward()

    model = make_model(device)
    opt = distributed(model, make_opt(model.parameters()), "amp.bf16." + kind)
    grads = []
    for step in range(STEPS):
        opt.zero_grad()
        backward(model, *batch(step, hvd.rank(), device))
        opt.step()
        assert all(p.grad.dtype == torch.float32 for p in model.parameters())
        grads.append(flat_grad(model))

    ref = make_model(device)
    ref_opt = make_opt(ref.parameters())
    ref_grads = []
    for step in range(STEPS):
        set_averaged_rank_gradients(ref, step, device, backward)
        ref_opt.step()
        ref_grads.append(flat_grad(ref))
    assert_series_match(grads, ref_grads, "averaged gradient")
    assert_matches(model, ref, "amp.bf16." + kind, rtol=1e-5, atol=1e-6)


def _grad_scaler(device, init_scale):
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device.type, init_scale=init_scale)
    return torch.cuda.amp.GradScaler(init_scale=init_scale)


# Large enough that fp16 gradients of the scaled loss overflow at first: the
# scaler skips steps and backs off, the same on every rank and in the
# reference.
INIT_SCALE = 2.0 ** 22
CLIP = 0.5


@pytest.mark.parametrize("kind", DEVICES)
def test_fp16_autocast_grad_scaler_horovod_recipe(kind):
    device = device_of(kind)
    if device.type == "cpu" and TORCH_VERSION < (2, 3):
        pytest.skip("fp16 CPU autocast and torch.amp.GradScaler('cpu') need torch >= 2.3; "
                    "this is torch %s" % torch.__version__)
    make_opt = lambda ps: torch.optim.AdamW(ps, lr=0.01)  # noqa: E731

    def scaled_backward(scaler):
        def backward(model, x, y):
            with autocast(device, torch.float16):
                out = model(x)
                assert out.dtype == torch.float16
                loss = torch.nn.functional.mse_loss(out, y)
            scaler.scale(loss).backward()
        return backward

    model = make_model(device)
    opt = distributed(model, make_opt(model.parameters()), "amp.fp16." + kind)
    scaler = _grad_scaler(device, INIT_SCALE)
    backward = scaled_backward(scaler)
    steps = STEPS + 4
    norms = []
    for step in range(steps):
        opt.zero_grad()
        backward(model, *batch(step, hvd.rank(), device))
        opt.synchronize()
        scaler.unscale_(opt)
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)))
        with opt.skip_synchronize():
            scaler.step(opt)
        scaler.update()

    ref = make_model(device)
    ref_opt = make_opt(ref.parameters())
    ref_scaler = _grad_scaler(device, INIT_SCALE)
    ref_backward = scaled_backward(ref_scaler)
    ref_norms = []
    for step in range(steps):
        set_averaged_rank_gradients(ref, step, device, ref_backward)
        ref_scaler.unscale_(ref_opt)
        ref_norms.append(float(torch.nn.utils.clip_grad_norm_(ref.parameters(), CLIP)))
        ref_scaler.step(ref_opt)
        ref_scaler.update()

    # The scaler backed off (overflowing steps were skipped) and then
    # trained, making the same decisions as the reference.
    assert scaler.get_scale() < INIT_SCALE
    assert scaler.get_scale() == ref_scaler.get_scale()
    assert_series_match(norms, ref_norms, "unscaled gradient norm")
    finite = [n for n in norms if n == n and n != float("inf")]
    assert 0 < len(finite) < steps, norms
    assert_matches(model, ref, "amp.fp16." + kind, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("clip", ["norm", "value"])
def test_gradient_clipping_on_averaged_gradients(kind, clip):
    device = device_of(kind)
    make_opt = lambda ps: torch.optim.SGD(ps, lr=0.2, momentum=0.9)  # noqa: E731
    clipped = []

    def clip_(model):
        if clip == "norm":
            clipped.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)))
        else:
            torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)

    tag = "clip.%s.%s" % (clip, kind)
    model = make_model(device)
    opt = distributed(model, make_opt(model.parameters()), tag)
    for step in range(STEPS):
        opt.zero_grad()
        loss_fn(model, *batch(step, hvd.rank(), device)).backward()
        opt.synchronize()
        clip_(model)
        with opt.skip_synchronize():
            opt.step()

    ref = make_model(device)
    ref_opt = make_opt(ref.parameters())
    for step in range(STEPS):
        ref_opt.zero_grad()
        loss_fn(ref, *full_batch(step, device)).backward()
        clip_(ref)
        ref_opt.step()
    if clip == "norm":
        # The clip was active: the total norms were above max_norm.
        assert min(clipped) > 0.05
        assert_series_match(clipped[:STEPS], clipped[STEPS:], "gradient norm")
    assert_matches(model, ref, tag, rtol=1e-5, atol=1e-6)


def _compile_skip_reason():
    if not hasattr(torch, "compile"):
        return "torch.compile needs torch >= 2.0; this is torch %s" % torch.__version__
    try:
        dynamo = importlib.import_module("torch._dynamo")
        if not dynamo.is_dynamo_supported():
            return "torch.compile is not supported on this Python/platform"
    except Exception as e:  # noqa: BLE001
        return "torch._dynamo unavailable: %s" % e
    return None


# aot_eager runs Dynamo's graph capture and AOTAutograd's compiled backward:
# what kolo's gradient hooks see under torch.compile. Inductor only changes
# the kernels inside those graphs, and compiling its C++ kernels on every
# rank at once takes minutes on a loaded 2-core CI machine;
# KOLO_TEST_COMPILE_BACKEND=inductor runs this test with it.
COMPILE_BACKEND = os.environ.get("KOLO_TEST_COMPILE_BACKEND", "aot_eager")


_COMPILE_SKIP = _compile_skip_reason()


@pytest.mark.skipif(_COMPILE_SKIP is not None, reason=str(_COMPILE_SKIP))
@pytest.mark.parametrize("kind", DEVICES)
def test_torch_compiled_model(kind):
    device = device_of(kind)
    make_opt = lambda ps: torch.optim.SGD(ps, lr=0.2, momentum=0.9)  # noqa: E731
    model = make_model(device)
    compiled = torch.compile(model, backend=COMPILE_BACKEND)
    opt = distributed(compiled, make_opt(compiled.parameters()), "compile." + kind)
    for step in range(STEPS):
        opt.zero_grad()
        loss_fn(compiled, *batch(step, hvd.rank(), device)).backward()
        # The gradient hooks enqueued every allreduce during backward.
        assert opt._kolo_submitted() == len(list(model.parameters()))
        opt.step()

    ref = make_model(device)
    ref_opt = make_opt(ref.parameters())
    for step in range(STEPS):
        ref_opt.zero_grad()
        loss_fn(ref, *full_batch(step, device)).backward()
        ref_opt.step()
    # Inductor's generated kernels may round differently from eager ones.
    assert_matches(model, ref, "compile." + kind, rtol=1e-5, atol=1e-6,
                   exact=COMPILE_BACKEND == "aot_eager")
