"""horovod.torch.mpi_ops under kolo: the same public names as kolo.torch.

Horovod programs import from it directly (``from horovod.torch.mpi_ops
import synchronize``); ``from kolo.torch.mpi_ops import synchronize`` works
the same way. Nothing is defined here: this module mirrors kolo.torch's
public names, whatever they are when it is first imported (kolo.torch is
always fully imported by then).
"""
import kolo.torch as _torch

globals().update({k: v for k, v in vars(_torch).items() if not k.startswith("_")})
