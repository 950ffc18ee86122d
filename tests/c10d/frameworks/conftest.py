"""Training frameworks over the "kolo" backend, every rank running this suite
under kolorun (which sets what env:// reads): the same small regression in
each, checked against one process training on the global batch.

The data: SAMPLES rows; a step of n ranks with PER_RANK rows each trains on
the n*PER_RANK rows that one process would take as one batch, so the
framework's result equals reference(n) (DDP averages the ranks' gradients).
"""
import os

import torch

import kolo.torch  # noqa: F401  (registers the "kolo" backend)

torch.set_num_threads(1)
PER_RANK = 4
STEPS = 3
LR = 0.1


# The job's size, from the environment kolorun sets for env:// (read once:
# Lightning's teardown deletes WORLD_SIZE).
_WORLD_SIZE = int(os.environ["WORLD_SIZE"])


def world_size():
    return _WORLD_SIZE


def samples(size):
    return size * PER_RANK * STEPS


def dataset(size):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(samples(size), 5, generator=g, dtype=torch.float64)
    y = x @ torch.arange(1.0, 6.0, dtype=torch.float64)[:, None] + 0.1
    return torch.utils.data.TensorDataset(x, y)


def make_model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(),
                               torch.nn.Linear(4, 1)).double()


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=0.9)


def loss_fn(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def reference(size):
    """One process, STEPS batches of size * PER_RANK rows in order."""
    model = make_model()
    opt = make_optimizer(model.parameters())
    loader = torch.utils.data.DataLoader(dataset(size), batch_size=size * PER_RANK)
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model, x, y).backward()
        opt.step()
    return flat(model)


def same_on_every_rank(tensor):
    """Every rank's tensor, gathered over the default group."""
    world = [torch.empty_like(tensor) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(world, tensor)
    return all(torch.equal(t, tensor) for t in world)
