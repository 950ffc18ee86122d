"""PyTorch Lightning with kolo: DDPStrategy(process_group_backend="kolo")
makes the default group on kolo's backend, and Trainer.fit trains as one
process on the global batch would."""
import datetime
import os

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy

from conftest import (PER_RANK, STEPS, dataset, flat, loss_fn, make_model, make_optimizer,
                      reference, same_on_every_rank, world_size)


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = make_model()
        self.steps = 0
        self.backend = None

    def training_step(self, batch, batch_idx):
        self.steps += 1
        self.backend = dist.get_backend()
        return loss_fn(self.net, *batch)

    def configure_optimizers(self):
        return make_optimizer(self.net.parameters())


def test_trainer_fit_on_kolo_equals_one_process_on_the_global_batch(tmp_path):
    module = Regression()
    trainer = L.Trainer(
        accelerator="cpu", devices=world_size(), num_nodes=1,
        strategy=DDPStrategy(process_group_backend="kolo",
                             timeout=datetime.timedelta(seconds=60)),
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path, use_distributed_sampler=False)
    # Each rank's share in order (Lightning's own sampler would shuffle):
    # rank r takes rows r, r + n, ..., so a step covers n * PER_RANK rows.
    data = dataset(world_size())
    sampler = torch.utils.data.distributed.DistributedSampler(
        data, num_replicas=world_size(), rank=int(os.environ["RANK"]), shuffle=False)
    loader = torch.utils.data.DataLoader(data, batch_size=PER_RANK, sampler=sampler)
    try:
        trainer.fit(module, loader)
        assert trainer.world_size == world_size() and trainer.global_rank == dist.get_rank()
        assert module.backend == "kolo" and module.steps == STEPS
        weights = flat(module.net)
        assert same_on_every_rank(weights)
        torch.testing.assert_close(weights, reference(world_size()), rtol=1e-9, atol=1e-12)
    finally:
        if dist.is_initialized():  # Lightning leaves the group to the program
            dist.destroy_process_group()
