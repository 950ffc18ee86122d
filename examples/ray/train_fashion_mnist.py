"""Fashion-MNIST trained with kolo.torch under Ray Train (DataParallelTrainer
with kolo.ray.KoloConfig): the Ray Train form of examples/python/fashion_mnist.py.

    python examples/ray/train_fashion_mnist.py --num-workers 2 --epochs 3
    python examples/ray/train_fashion_mnist.py --address auto ...   # an existing cluster

The same CNN, optimizer and batch as the kolorun example. Ray Data shards the
training and test sets between the workers (--data-source ray-data, the
default; the driver reads Debian's fashion-mnist files and every worker gets
its shard through the object store), or every worker reads the files itself
and takes the same shard the kolorun example takes (--data-source files: for
comparing throughput with kolorun). Each epoch ends with ray.train.report:
loss, test accuracy, images/s and a checkpoint from rank 0; running again
with the same --storage-path and --name resumes from the last checkpoint.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

import ray
import ray.cloudpickle
from ray.train import Checkpoint, RunConfig, ScalingConfig

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fashion_mnist  # noqa: E402  (the model and the file reader of the kolorun example)

from kolo.ray import KoloConfig  # noqa: E402

# Ray's workers cannot import fashion_mnist by name: ship its code by value.
ray.cloudpickle.register_pickle_by_value(fashion_mnist)

MEAN, STD = 0.2860, 0.3530  # the kolorun example's normalisation


def images_to_input(images, device):
    """uint8 [N, 28, 28] -> normalised float [N, 1, 28, 28] on device."""
    x = images.to(device, non_blocking=True).float().div_(255.0).unsqueeze(1)
    return (x - MEAN) / STD


def file_batches(config, kind, rank, size, epoch):
    """--data-source files: this rank's batches, as the kolorun example cuts them."""
    path = os.path.join(config["data"], "%s-%s-idx%d-ubyte.gz")
    images = torch.from_numpy(fashion_mnist.read_idx(path % (kind, "images", 3)).copy())
    labels = torch.from_numpy(fashion_mnist.read_idx(path % (kind, "labels", 1)).astype(np.int64))
    if kind == "t10k":
        order = torch.arange(rank, len(images), size)
    else:
        per_rank = len(images) // size
        order = torch.randperm(len(images), generator=torch.Generator().manual_seed(epoch))
        order = order[rank * per_rank:(rank + 1) * per_rank]
    batch = config["batch_size"] if kind == "train" else 1000
    for b in range(0, len(order), batch):
        idx = order[b:b + batch]
        yield images[idx], labels[idx]


def shard_batches(config, kind):
    """--data-source ray-data: this worker's shard of the Ray Data set."""
    shard = ray.train.get_dataset_shard(kind)
    batch = config["batch_size"] if kind == "train" else 1000
    for b in shard.iter_torch_batches(batch_size=batch, local_shuffle_buffer_size=None):
        yield b["image"], b["label"]


def train_loop(config):
    import kolo.torch as hvd

    torch.set_num_threads(1)  # one core per worker; kolo's thread needs the rest
    hvd.init()                # the rendezvous KoloConfig prepared
    rank, size = hvd.rank(), hvd.size()
    device = (torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available()
              else torch.device("cpu"))  # KoloConfig made this worker's GPU current

    torch.manual_seed(1234)
    model = fashion_mnist.Net().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"] * size)
    start = 1
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    def batches(kind, epoch):
        if config["data_source"] == "files":
            return file_batches(config, kind, rank, size, epoch)
        return shard_batches(config, kind)

    for epoch in range(start, config["epochs"] + 1):
        model.train()
        begin = time.time()
        loss_sum, steps, images = 0.0, 0, 0
        for x, y in batches("train", epoch):
            x, y = images_to_input(x, device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item()
            steps += 1
            images += len(y)
        seconds = time.time() - begin
        mean_loss = hvd.allreduce(torch.tensor(loss_sum / max(steps, 1)), name="epoch.loss")
        all_images = hvd.allreduce(torch.tensor(float(images)), op=hvd.Sum, name="epoch.images")
        slowest = hvd.allreduce(torch.tensor(seconds), op=hvd.Max, name="epoch.seconds")

        model.eval()
        correct, seen = 0, 0
        with torch.no_grad():
            for x, y in batches("t10k" if config["data_source"] == "files" else "test", epoch):
                correct += int((model(images_to_input(x, device)).argmax(1) == y.to(device)).sum())
                seen += len(y)
        counts = hvd.allreduce(torch.tensor([correct, seen]), op=hvd.Sum, name="test.counts")

        metrics = {"epoch": epoch, "loss": mean_loss.item(),
                   "accuracy": counts[0].item() / counts[1].item(),
                   "images_per_s": all_images.item() / slowest.item()}
        with tempfile.TemporaryDirectory() as d:
            saved = None
            if rank == 0:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "epoch": epoch}, os.path.join(d, "state.pt"))
                saved = Checkpoint.from_directory(d)
                print("epoch %d: loss %.4f, test accuracy %.2f%%, %.0f images/s (%.1f s)"
                      % (epoch, metrics["loss"], 100 * metrics["accuracy"],
                         metrics["images_per_s"], slowest.item()), flush=True)
            ray.train.report(metrics, checkpoint=saved)
    hvd.shutdown()


def ray_datasets(data_dir):
    """The train and test sets as Ray Data sets of {"image": uint8[28, 28], "label": int64}."""
    out = {}
    for kind, name in (("train", "train"), ("t10k", "test")):
        path = os.path.join(data_dir, "%s-%s-idx%d-ubyte.gz")
        images = fashion_mnist.read_idx(path % (kind, "images", 3))
        labels = fashion_mnist.read_idx(path % (kind, "labels", 1)).astype(np.int64)
        out[name] = ray.data.from_numpy(images).rename_columns({"data": "image"}).zip(
            ray.data.from_numpy(labels).rename_columns({"data": "label"}))
    return out


def trainer_class():
    """Ray Train's DataParallelTrainer: V2 (Ray's default), or V1 under
    RAY_TRAIN_V2_ENABLED=0."""
    try:
        from ray.train.v2._internal.constants import is_v2_enabled
    except ImportError:  # a Ray before Train V2
        def is_v2_enabled():
            return False
    if is_v2_enabled():
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    else:
        from ray.train.data_parallel_trainer import DataParallelTrainer
    return DataParallelTrainer


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--use-gpu", action="store_true", help="one GPU per worker")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--lr", type=float, default=1e-3, help="scaled by the number of workers")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--data-source", choices=["ray-data", "files"], default="ray-data")
    parser.add_argument("--address", help="Ray cluster to join (default: start a local one)")
    parser.add_argument("--num-cpus", type=int, help="CPUs of the local cluster")
    parser.add_argument("--storage-path", default=os.path.join(tempfile.gettempdir(), "kolo-ray"))
    parser.add_argument("--name", default="fashion-mnist")
    args = parser.parse_args()

    ray.init(address=args.address, num_cpus=None if args.address else args.num_cpus)
    config = {k: getattr(args, k) for k in ("epochs", "batch_size", "lr", "data", "data_source")}
    trainer = trainer_class()(
        train_loop,
        train_loop_config=config,
        backend_config=KoloConfig(timeout_s=120),
        scaling_config=ScalingConfig(num_workers=args.num_workers, use_gpu=args.use_gpu),
        run_config=RunConfig(name=args.name, storage_path=args.storage_path),
        datasets=ray_datasets(args.data) if args.data_source == "ray-data" else None)
    result = trainer.fit()
    print("final: %s\ncheckpoint: %s" % (result.metrics, result.checkpoint))


if __name__ == "__main__":
    main()
