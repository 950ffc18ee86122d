"""LR schedulers and DistributedOptimizer, whichever is made first: a scheduler
made before the wrapping replaced the optimizer's step on the instance (to
count steps), which once made every step() skip the reduction, so each rank
silently trained its own model. Both orders must average the gradients,
count the steps for the scheduler, and change the learning rate."""
import warnings

import pytest
import torch

import kolo.torch as hvd
from conftest import same_on_all_ranks

STEPS = 3


def make_model():
    torch.manual_seed(11)
    return torch.nn.Linear(4, 2).double()


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(6, 4, generator=g, dtype=torch.float64)


def reference():
    """One process on the global batch: the average of every rank's gradient."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for step in range(STEPS):
        opt.zero_grad()
        for r in range(hvd.size()):
            (model(batch(step, r)).square().mean() / hvd.size()).backward()
        opt.step()
        sched.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("order", ["scheduler_first", "wrapper_first"])
def test_a_scheduler_made_in_either_order_keeps_the_averaging(order):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    if order == "scheduler_first":
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    else:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    with warnings.catch_warnings():
        # torch warns when the scheduler did not see the optimizer step.
        warnings.filterwarnings("error", message=".*lr_scheduler.step\\(\\) before.*")
        for step in range(STEPS):
            opt.zero_grad()
            model(batch(step, hvd.rank())).square().mean().backward()
            opt.step()
            sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5 * 0.5 ** STEPS)
    for i, (p, want) in enumerate(zip(model.parameters(), reference())):
        assert same_on_all_ranks(p, "sched.%s.%d" % (order, i)), "ranks trained apart"
        torch.testing.assert_close(p.detach(), want)


def test_a_step_replaced_by_hand_is_refused():
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.step = lambda closure=None: None
    with pytest.raises(ValueError, match="step was replaced on the instance"):
        hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
