"""The Python twin of elastic_worker.cc for the elastic tests, written as a
Horovod elastic script (only the import differs): an MLP on the first
--samples Fashion-MNIST training images, a DataLoader over
hvd.elastic.ElasticSampler, a hvd.elastic.TorchState and @hvd.elastic.run.
It prints the same lines as the C++ worker (see elastic_worker.cc)."""
import argparse
import gzip
import hashlib
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

if "--horovod" in sys.argv:  # benchmarks/elastic_recovery.py: the same script on Horovod
    import horovod.torch as hvd
else:
    import kolo.torch as hvd  # was: import horovod.torch as hvd


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


class Indexed(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


def now_ms():
    return int(time.time() * 1000)


def say(text):
    print(text, flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--samples", type=int, default=768)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--commit-every", type=int, default=4)
    p.add_argument("--step-sleep-ms", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--crash-on-host", default="")
    p.add_argument("--crash-after-steps", type=int, default=3)
    p.add_argument("--stop-file", default="")  # ends training after the epoch it appears in
    p.add_argument("--tag", default="")  # marks the test's processes
    # A static process set of ranks 0 and 1 (rebuilt by every reset) and a
    # dynamic one of rank 0 (gone after a reset: re-added in on_reset).
    p.add_argument("--process-sets", action="store_true")
    p.add_argument("--horovod", action="store_true")  # run on Horovod (import above)
    args = p.parse_args()
    torch.set_num_threads(1)
    host = os.environ.get("KOLO_HOSTNAME", "?")

    images = read_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"))[:args.samples]
    labels = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"))[:args.samples]
    x = (torch.from_numpy(images.astype(np.float32) / 255.0).reshape(-1, 784) - 0.2860) / 0.3530
    y = torch.from_numpy(labels.astype(np.int64))
    dataset = Indexed(x, y)

    static = hvd.ProcessSet([0, 1])
    hvd.init(process_sets=[static] if args.process_sets else None)
    dynamic = [hvd.add_process_set([0])] if args.process_sets else []
    # kolo's worker id and world version; Horovod has neither: the pid, and
    # a count of resets.
    worker = hvd.elastic.worker_id() if hasattr(hvd.elastic, "worker_id") else os.getpid()
    resets = [1]

    def world_version():
        if hasattr(hvd.elastic, "world_version"):
            return hvd.elastic.world_version()
        return resets[0]

    say("START worker=%d pid=%d host=%s" % (worker, os.getpid(), host))

    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(784, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size())
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=1)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, sampler=sampler)

    def on_reset():
        resets[0] += 1
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        say("RESET worker=%d size=%d" % (worker, hvd.size()))
        if args.process_sets:
            say("PSETS worker=%d static_id=%s dynamic_id=%s"
                % (worker, static.process_set_id, dynamic[0].process_set_id))
            dynamic[0] = hvd.add_process_set([0])

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        v = world_version()
        rank = hvd.rank()
        say("WORLD v=%d worker=%d rank=%d size=%d epoch=%d batch=%d processed=%d t=%d"
            % (v, worker, rank, hvd.size(), state.epoch, state.batch,
               state.sampler.processed_num, now_ms()))
        steps = 0
        while state.epoch < args.epochs:
            for batch_idx, (data, target, idx) in enumerate(loader):
                say("BATCH v=%d rank=%d epoch=%d batch=%d idx=%s"
                    % (v, rank, state.epoch, state.batch, ",".join(str(int(i)) for i in idx)))
                optimizer.zero_grad()
                F.cross_entropy(model(data), target).backward()
                optimizer.step()
                state.sampler.record_batch(batch_idx, args.batch)
                say("STEP v=%d worker=%d rank=%d epoch=%d batch=%d t=%d"
                    % (v, worker, rank, state.epoch, state.batch, now_ms()))
                state.batch += 1
                steps += 1
                if args.crash_on_host and host == args.crash_on_host \
                        and steps >= args.crash_after_steps:
                    say("CRASH worker=%d host=%s" % (worker, host))
                    os._exit(3)
                if args.step_sleep_ms:
                    time.sleep(args.step_sleep_ms / 1000.0)
                if state.batch % args.commit_every == 0:
                    say("COMMIT v=%d worker=%d epoch=%d batch=%d processed=%d"
                        % (v, worker, state.epoch, state.batch, state.sampler.processed_num))
                    state.commit()
                    if args.process_sets and static.included():
                        total = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="ps.static",
                                              process_set=static).item()
                        say("PSET v=%d rank=%d static_sum=%d" % (v, rank, total))
            # The epoch's end: counters and the sampler move on together.
            state.epoch += 1
            state.batch = 0
            state.sampler.set_epoch(state.epoch)
            say("COMMIT v=%d worker=%d epoch=%d batch=0 processed=0" % (v, worker, state.epoch))
            state.commit()
            if args.stop_file:
                stop = int(hvd.rank() == 0 and os.path.exists(args.stop_file))
                stop = hvd.allreduce(torch.tensor([stop]), op=hvd.Max, name="stop").item()
                if stop:
                    args.epochs = state.epoch

    train(state)
    digest = hashlib.sha1()
    for t in model.parameters():
        digest.update(t.detach().contiguous().numpy().tobytes())
    say("DONE worker=%d rank=%d world=%d epochs=%d checksum=%s"
        % (worker, hvd.rank(), world_version(), state.epoch, digest.hexdigest()[:16]))
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
