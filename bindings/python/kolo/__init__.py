"""kolo: Horovod-style data-parallel training on one C++ engine.

The PyTorch API lives in :mod:`kolo.torch`. This package holds the compiled
extension (``kolo._kolo``) and the error classes shared by every framework
binding.
"""
import torch as _torch  # noqa: F401  (loads libtorch and its Python glue before _kolo)

from kolo import _kolo
from kolo._kolo import (  # noqa: F401
    KoloError,
    KoloInternalError,
    KoloInvalidArgumentError,
    KoloMismatchError,
)

__version__ = _kolo.build_info()["version"]
