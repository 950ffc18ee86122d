"""Elastic Fashion-MNIST training with kolo.torch, written as a Horovod
elastic script: only the import differs from horovod.torch.

    kolorun -np 4 --min-np 2 --max-np 8 \\
        --host-discovery-script examples/elastic/discover_hosts.sh \\
        /usr/bin/python3 examples/python/elastic_fashion_mnist.py [--epochs 3]
    kolorun -np 4 --min-np 2 -H localhost:4 /usr/bin/python3 examples/python/elastic_fashion_mnist.py

The model, optimizer, sampler and counters live in a hvd.elastic.TorchState;
state.commit() every --commit-every batches. Kill a worker mid-epoch: the
others restore the last commit and go on with fewer ranks. Add hosts to the
discovery script's output: the job grows at the next commit.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

import kolo.torch as hvd  # was: import horovod.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import Net, load  # noqa: E402  (the CNN and the IDX reader)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--commit-every", type=int, default=20, help="batches between commits")
    parser.add_argument("--lr", type=float, default=1e-3, help="scaled by the number of ranks")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()

    torch.set_num_threads(1)
    train_x, train_y = load(args.data, "train")
    test_x, test_y = load(args.data, "t10k")
    dataset = torch.utils.data.TensorDataset(train_x, train_y)

    hvd.init()  # waits for the first world that includes this process
    # No collective before train(): a worker that joins later starts here.
    torch.manual_seed(1234)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr * hvd.size())
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=42)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    def on_reset():
        for group in optimizer.param_groups:  # the learning rate follows the world size
            group["lr"] = args.lr * hvd.size()

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        if hvd.rank() == 0:
            print("%d ranks, resuming at epoch %d batch %d" % (hvd.size(), state.epoch, state.batch),
                  flush=True)
        while state.epoch < args.epochs:
            model.train()
            for batch_idx, (data, target) in enumerate(loader):
                optimizer.zero_grad()
                F.cross_entropy(model(data), target).backward()
                optimizer.step()
                state.sampler.record_batch(batch_idx, args.batch_size)
                state.batch += 1
                if state.batch % args.commit_every == 0:
                    state.commit()
            # The epoch's end: the counters and the sampler move on together.
            state.epoch += 1
            state.batch = 0
            state.sampler.set_epoch(state.epoch)
            state.commit()
            model.eval()
            with torch.no_grad():
                correct = int((model(test_x).argmax(1) == test_y).sum())
            if hvd.rank() == 0:
                print("epoch %d: test accuracy %.2f%% (%d ranks)"
                      % (state.epoch, 100.0 * correct / len(test_y), hvd.size()), flush=True)

    train(state)
    hvd.shutdown()


if __name__ == "__main__":
    main()
