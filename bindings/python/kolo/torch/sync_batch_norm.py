"""SyncBatchNorm: batch normalization over the batches of all ranks."""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from kolo import _kolo, _kolo_torch
from kolo.torch._args import _count


class SyncBatchNorm(_BatchNorm):
    """horovod.torch.SyncBatchNorm with torch.nn.SyncBatchNorm's numerics.

    In training mode the mean and variance are those of every rank's batch
    together (batch sizes may differ between ranks), the running statistics
    are updated with the unbiased variance of that global batch, and the
    input gradient is the one of the global batch: N ranks with batches of
    B compute what one process computes with the N*B batch. Weight and bias
    gradients stay local; DistributedOptimizer reduces them like any other
    gradient. In eval mode (with running statistics) nothing is
    communicated. Unlike Horovod's, it runs on the CPU as well as on CUDA.

    Every rank must run the layer's forward and backward the same number of
    times in the same order; build the model the same way on every rank (the
    layer's collectives are named after the order of construction).

    Args:
        num_features (int): C of an (N, C, ...) input.
        eps (float): added to the variance.
        momentum (float or None): factor of the running-statistics update;
            None: a cumulative average.
        affine (bool): learn a weight and a bias.
        track_running_stats (bool): keep running mean and variance (for eval
            mode).
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        num_features = _count(num_features, "SyncBatchNorm", "num_features")
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self._kolo_name = _kolo_torch.next_name("sync_batch_norm")

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def forward(self, input):
        """Normalizes input (N, C, ...): with all ranks' statistics in
        training mode (collective), as torch.nn.BatchNorm otherwise or when
        the job has one rank. Raises ValueError for inputs under 2D."""
        self._check_input_dim(input)
        # torch.nn.modules.batchnorm._BatchNorm's bookkeeping.
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                      else self.momentum)
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        use_running = not self.training or self.track_running_stats
        running_mean = self.running_mean if use_running else None
        running_var = self.running_var if use_running else None
        if not (bn_training and self.training) or _kolo.size() == 1:
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias,
                                bn_training, factor, self.eps)
        return _kolo_torch.sync_batch_norm(input, self.weight, self.bias, running_mean, running_var,
                                           factor, self.eps, self._kolo_name)

    @classmethod
    def convert_sync_batchnorm(cls, module):
        """module with every torch.nn.BatchNorm*d replaced by a SyncBatchNorm
        holding its parameters and running statistics (as
        torch.nn.SyncBatchNorm.convert_sync_batchnorm)."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats)
            if module.affine:
                with torch.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.train(module.training)
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child))
        return out

