"""Fashion-MNIST CNN trained data-parallel with kolo.torch (the Python twin
of examples/fashion_mnist/main.cc).

    kolorun -np 2 /usr/bin/python3 examples/python/fashion_mnist.py [--epochs 3]

Each rank trains on its own shard of the training set; DistributedOptimizer
averages the gradients while backward runs; rank 0 prints per-epoch loss,
test accuracy and images/s. Reads the gzip'd IDX files of Debian's
fashion-mnist data set (or --data DIR).
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

import kolo.torch as hvd


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3)
        self.conv2 = torch.nn.Conv2d(32, 64, 3)
        self.fc1 = torch.nn.Linear(64 * 5 * 5, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # 26 -> 13
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # 11 -> 5
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def read_idx(path):
    """An IDX file (gzip'd or not) as a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, kind):
    def find(stem):
        for name in (stem + ".gz", stem):
            if os.path.exists(os.path.join(data_dir, name)):
                return os.path.join(data_dir, name)
        raise FileNotFoundError(os.path.join(data_dir, stem + "[.gz]"))

    images = read_idx(find("%s-images-idx3-ubyte" % kind))
    labels = read_idx(find("%s-labels-idx1-ubyte" % kind))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    x = (x - 0.2860) / 0.3530
    return x, torch.from_numpy(labels.astype(np.int64))


def train(epochs, batch_size, lr, data, device, compression=hvd.Compression.none,
          progress=False, on_epoch=None):
    """Trains Net on this rank's shard of Fashion-MNIST (hvd.init() done) and
    returns one dict per epoch (loss, accuracy, images_per_s, seconds: the
    job's). progress: rank 0 prints every 100 batches; on_epoch(dict) is
    called on every rank after each epoch. examples/ray/fashion_mnist.py
    runs this same loop in Ray actors."""
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(1234)
    train_x, train_y = load(data, "train")
    test_x, test_y = load(data, "t10k")
    test_x, test_y = test_x[rank::size].to(device), test_y[rank::size].to(device)
    train_x, train_y = train_x.to(device), train_y.to(device)

    model = Net().to(device)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr * size)
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(), compression=compression)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    per_rank = len(train_x) // size
    batches_per_epoch = (per_rank + batch_size - 1) // batch_size
    if progress and rank == 0:
        print("Fashion-MNIST: %d training images, %d ranks, batch %d per rank, on %s"
              % (len(train_x), size, batch_size, device), flush=True)

    history = []
    for epoch in range(1, epochs + 1):
        model.train()
        # Same permutation on every rank (seeded by epoch); each takes a shard.
        order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(epoch))
        shard = order[rank * per_rank:(rank + 1) * per_rank]
        start = time.time()
        loss_sum, images = 0.0, 0
        for b in range(batches_per_epoch):
            idx = shard[b * batch_size:(b + 1) * batch_size].to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            loss_sum += loss.item()
            images += len(idx)
            if progress and rank == 0 and (b + 1) % 100 == 0:
                print("  epoch %d: %d/%d batches, loss %.4f"
                      % (epoch, b + 1, batches_per_epoch, loss_sum / (b + 1)), flush=True)
        seconds = time.time() - start
        mean_loss = hvd.allreduce(torch.tensor(loss_sum / max(batches_per_epoch, 1)),
                                  name="epoch.loss").item()
        all_images = hvd.allreduce(torch.tensor(float(images)), op=hvd.Sum,
                                   name="epoch.images").item()

        model.eval()
        with torch.no_grad():
            correct = sum(int((model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum())
                          for i in range(0, len(test_x), 1000))
        counts = hvd.allreduce(torch.tensor([correct, len(test_x)]), op=hvd.Sum,
                               name="test.counts")
        history.append({"epoch": epoch, "loss": mean_loss,
                        "accuracy": counts[0].item() / counts[1].item(),
                        "images_per_s": all_images / seconds, "seconds": seconds})
        if on_epoch is not None:
            on_epoch(history[-1])
    return history


def report(h):
    print("epoch %d: loss %.4f, test accuracy %.2f%%, %.0f images/s (%.1f s)"
          % (h["epoch"], h["loss"], 100.0 * h["accuracy"], h["images_per_s"], h["seconds"]),
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=1e-3, help="scaled by the number of ranks")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--device", choices=["cpu", "cuda"],
                        help="default: cuda:local_rank when CUDA is available, else cpu")
    args = parser.parse_args()

    torch.set_num_threads(1)  # one core per rank; kolo's thread needs the rest
    hvd.init()
    use_cuda = args.device == "cuda" or (args.device is None and torch.cuda.is_available())
    device = torch.device("cuda", hvd.local_rank()) if use_cuda else torch.device("cpu")
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    train(args.epochs, args.batch_size, args.lr, args.data, device, compression, progress=True,
          on_epoch=report if hvd.rank() == 0 else None)
    hvd.shutdown()


if __name__ == "__main__":
    main()
