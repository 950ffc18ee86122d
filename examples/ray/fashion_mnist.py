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

import ray
import torch

from kolo.ray import RayExecutor

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")


def train(epochs, batch_size, lr, data, use_cuda):
    sys.path.insert(0, EXAMPLES)
    import fashion_mnist as fm     # examples/python/fashion_mnist.py: the training loop
    import kolo.torch as hvd

    torch.set_num_threads(1)
    hvd.init()
    device = torch.device("cuda", hvd.local_rank()) if use_cuda else torch.device("cpu")
    return fm.train(epochs, batch_size, lr, data, device)


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
    sys.path.insert(0, EXAMPLES)
    import fashion_mnist as fm
    for h in results[0]:
        fm.report(h)


if __name__ == "__main__":
    main()
