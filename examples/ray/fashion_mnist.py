"""Fashion-MNIST on a local Ray cluster with kolo.ray.RayExecutor: the CNN,
data and training loop of examples/python/fashion_mnist.py (imported from
there), run by Ray actors instead of processes started by kolorun.

    python examples/ray/fashion_mnist.py --workers 2 --epochs 1
    python examples/ray/fashion_mnist.py --address auto ...   # an existing cluster

Each worker trains on its shard; the driver prints each epoch's loss, test
accuracy and images/s (from rank 0's result). With --address, every node
needs this checkout at the same path (the workers import
examples/python/fashion_mnist.py) and the kolo package on PYTHONPATH.
"""
import argparse
import os
import sys
import time

import ray
import torch
import torch.nn.functional as F

from kolo.ray import RayExecutor

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")


def train(epochs, batch_size, lr, data, use_cuda):
    sys.path.insert(0, EXAMPLES)
    import fashion_mnist as fm     # examples/python/fashion_mnist.py: Net, load
    import kolo.torch as hvd

    torch.set_num_threads(1)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(1234)
    device = torch.device("cuda", hvd.local_rank()) if use_cuda else torch.device("cpu")
    train_x, train_y = fm.load(data, "train")
    test_x, test_y = fm.load(data, "t10k")
    test_x, test_y = test_x[rank::size].to(device), test_y[rank::size].to(device)
    train_x, train_y = train_x.to(device), train_y.to(device)

    model = fm.Net().to(device)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr * size)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    per_rank = len(train_x) // size
    batches = (per_rank + batch_size - 1) // batch_size
    history = []
    for epoch in range(1, epochs + 1):
        model.train()
        order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(epoch))
        shard = order[rank * per_rank:(rank + 1) * per_rank]
        start = time.time()
        loss_sum, images = 0.0, 0
        for b in range(batches):
            idx = shard[b * batch_size:(b + 1) * batch_size].to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            loss_sum += loss.item()
            images += len(idx)
        seconds = time.time() - start
        mean_loss = hvd.allreduce(torch.tensor(loss_sum / max(batches, 1)), name="epoch.loss").item()
        all_images = hvd.allreduce(torch.tensor(float(images)), op=hvd.Sum, name="epoch.images").item()
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum())
                          for i in range(0, len(test_x), 1000))
        counts = hvd.allreduce(torch.tensor([correct, len(test_x)]), op=hvd.Sum, name="test.counts")
        history.append({"epoch": epoch, "loss": mean_loss,
                        "accuracy": counts[0].item() / counts[1].item(),
                        "images_per_s": all_images / seconds, "seconds": seconds})
    return history


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--lr", type=float, default=1e-3, help="scaled by the number of workers")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--cpus-per-worker", type=float, default=1)
    parser.add_argument("--use-gpu", action="store_true", help="one GPU per worker")
    parser.add_argument("--address", help="an existing Ray cluster (default: start a local one)")
    args = parser.parse_args()

    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=max(args.workers * args.cpus_per_worker, 1), include_dashboard=False)
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=args.workers,
                           cpus_per_worker=args.cpus_per_worker, use_gpu=args.use_gpu)
    executor.start()
    try:
        for w in executor.worker_info():
            print("rank %d on %s (local rank %d, pid %d)" % (w["rank"], w["node"], w["local_rank"], w["pid"]))
        results = executor.run(train, args=[args.epochs, args.batch_size, args.lr, args.data,
                                            args.use_gpu])
    finally:
        executor.shutdown()
    for h in results[0]:
        print("epoch %d: loss %.4f, test accuracy %.2f%%, %.0f images/s (%.1f s)"
              % (h["epoch"], h["loss"], 100.0 * h["accuracy"], h["images_per_s"], h["seconds"]),
              flush=True)


if __name__ == "__main__":
    main()
