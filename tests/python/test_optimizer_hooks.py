"""torch's optimizer step hooks on a DistributedOptimizer: each kind runs once
per step() (the optimizer's pre- and post-hooks, the global ones, and the
profiler's entry point Optimizer._optimizer_step_code), the pre-hooks see the
reduced gradients and the post-hooks the parameters after the whole step,
equal on every rank."""
import collections

import pytest
import torch

import kolo.torch as hvd
from conftest import same_on_all_ranks
from kolo.torch.compression import Compressor

STEPS = 3
# Step hooks came with torch 2.0; 1.13 has only the profiler's entry point.
HOOKS = hasattr(torch.optim.Optimizer, "register_step_pre_hook")


class HalfCompressor(Compressor):
    """Written in Python: the C++ reducer calls it from its hooks."""

    @staticmethod
    def compress(tensor):
        return tensor * 0.5, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor * 2.0


CASES = {
    "average": dict(),
    "passes_2": dict(backward_passes_per_step=2),
    "adasum": dict(op=hvd.Adasum),
    "python_compressor": dict(compression=HalfCompressor),
}


def make_model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(),
                               torch.nn.Linear(3, 2)).double()


def backward(model, step, micro):
    g = torch.Generator().manual_seed(100 * step + 10 * micro + hvd.rank())
    x = torch.randn(5, 4, generator=g, dtype=torch.float64)
    model(x).square().mean().backward()


class Recorder:
    """Counts each kind of hook and keeps, per step, the gradient the first
    pre-hook saw and the parameter the last post-hook saw."""

    def __init__(self, model):
        self.counts = collections.Counter()
        self.model = model
        self.grads, self.params = [], []

    def hook(self, kind):
        def record(*_):
            self.counts[kind] += 1
            weight = self.model[0].weight
            if kind == "pre":
                self.grads.append(weight.grad.detach().clone())
            if kind == "post":
                self.params.append(weight.detach().clone())
        return record


def train(case, hooks):
    """STEPS steps of a DistributedOptimizer with case's options; returns
    the Recorder and the model. hooks: also register the four step hooks."""
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5),
                                   named_parameters=model.named_parameters(), **CASES[case])
    rec = Recorder(model)
    handles = []
    if hooks:
        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)
        handles = [opt.register_step_pre_hook(rec.hook("pre")),
                   opt.register_step_post_hook(rec.hook("post")),
                   register_optimizer_step_pre_hook(rec.hook("global_pre")),
                   register_optimizer_step_post_hook(rec.hook("global_post"))]
    # The profiler's entry point, which torch's step wrapper calls after
    # each step (torch 1.13 and 2.x).
    profiled = opt._optimizer_step_code
    opt._optimizer_step_code = lambda: (rec.counts.update(["profiler"]), profiled())
    try:
        for step in range(STEPS):
            opt.zero_grad()
            for micro in range(opt.backward_passes_per_step):
                backward(model, step, micro)
            opt.step()
    finally:
        for h in handles:
            h.remove()
        del opt._optimizer_step_code
    return rec, model


@pytest.mark.parametrize("case", list(CASES))
def test_profiler_records_each_step_once(case):
    rec, _ = train(case, hooks=False)
    assert dict(rec.counts) == {"profiler": STEPS}, (case, dict(rec.counts))


@pytest.mark.parametrize("case", list(CASES))
def test_each_step_hook_runs_once_per_step(case):
    if not HOOKS:
        pytest.skip("torch %s has no optimizer step hooks (torch 2.0 added them)"
                    % torch.__version__)
    rec, model = train(case, hooks=True)
    kinds = ["profiler", "pre", "post", "global_pre", "global_post"]
    assert dict(rec.counts) == {k: STEPS for k in kinds}, (case, dict(rec.counts))
    for step, (grad, param) in enumerate(zip(rec.grads, rec.params)):
        # Pre-hooks see the reduced gradients (with Adasum, each rank's own:
        # the update is what gets combined).
        if case != "adasum":
            assert same_on_all_ranks(grad, "hooks.%s.grad.%d" % (case, step))
        # Post-hooks see the parameters after the whole step.
        assert same_on_all_ranks(param, "hooks.%s.param.%d" % (case, step))
    torch.testing.assert_close(rec.params[-1], model[0].weight.detach(), rtol=0, atol=0)
