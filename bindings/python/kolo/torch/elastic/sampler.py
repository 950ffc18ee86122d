"""ElasticSampler: horovod.torch.elastic's sampler on kolo's partitioning
(kolo::elastic::ElasticSampler, shared with the C++ API)."""

import torch.utils.data

from kolo import _kolo
from kolo.torch._args import _as_int, _count, _kind


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions a dataset over the ranks and re-partitions what an epoch
    has not processed yet after a reset.

    Each epoch is a permutation of the indices (seed + epoch, when shuffle);
    rank r takes every size-th index of the unprocessed rest, starting at r,
    padded with the rest's first indices so that every rank gets as many
    (like DistributedSampler). Call record_batch(batch_idx, batch_size)
    after every step (all ranks step together; processed indices are always
    a prefix of the epoch's order) and set_epoch(epoch + 1) at the end of an
    epoch, not its start. Keep it in the TorchState so that commits save its
    progress, restores roll it back and sync() gives every rank rank 0's.

    Args:
        dataset: anything with len(); only its length is used.
        shuffle (bool): permute each epoch's indices (seed + epoch).
        seed (int): the permutation's base seed, the same on every rank.
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        if not hasattr(dataset, "__len__"):
            raise ValueError("kolo.torch.elastic.ElasticSampler: dataset must have a len() "
                             "(a map-style torch Dataset), got %s" % _kind(dataset))
        # Any int, as torch.Generator.manual_seed takes (negative seeds
        # wrap around modulo 2**64).
        core_seed = _as_int(seed)
        if core_seed is None:
            raise ValueError("kolo.torch.elastic.ElasticSampler: seed must be an int, got %s"
                             % _kind(seed))
        core_seed %= 2 ** 64
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self._core = _kolo.ElasticSamplerCore(len(dataset), bool(shuffle), core_seed)
        self.indices = []
        self.reset()

    @property
    def epoch(self):
        """The current epoch (set_epoch())."""
        return self._core.epoch

    @property
    def processed_num(self):
        """How many indices of this epoch all ranks together processed."""
        return self._core.processed_num

    @property
    def processed_indices(self):
        """The indices processed this epoch by all ranks."""
        return set(self._core.processed_indices())

    def set_epoch(self, epoch):
        """Starts epoch `epoch`: nothing processed, a new order."""
        self._core.set_epoch(_count(epoch, "elastic.ElasticSampler.set_epoch", "epoch", 0))
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Every rank processed one more batch of batch_size samples."""
        fn = "elastic.ElasticSampler.record_batch"
        self._core.record_batch(_count(batch_idx, fn, "batch_idx", 0),
                                _count(batch_size, fn, "batch_size", 0))

    def get_indices(self, batch_idx, batch_size):
        """This rank's indices of batch batch_idx (counted from the last reset)."""
        fn = "elastic.ElasticSampler.get_indices"
        return self._core.get_indices(_count(batch_idx, fn, "batch_idx", 0),
                                      _count(batch_size, fn, "batch_size", 0))

    def state_dict(self):
        """{"epoch": ..., "processed_num": ...}: what a TorchState saves."""
        return dict(epoch=self._core.epoch, processed_num=self._core.processed_num)

    def load_state_dict(self, state_dict):
        """Takes a state_dict() back and re-partitions (reset())."""
        self._core.load_state_dict("epoch=%d processed=%d" % (state_dict["epoch"],
                                                               state_dict["processed_num"]))
        self.reset()

    def reset(self):
        """Re-reads rank and size and re-partitions the rest of the epoch."""
        self._core.reset()
        self.num_replicas = self._core.num_replicas
        self.rank = self._core.rank
        self.num_samples = self._core.num_samples
        self.total_size = self.num_samples * self.num_replicas
        self.indices = self._core.indices()

    def __iter__(self):
        self.indices = self._core.indices()
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
