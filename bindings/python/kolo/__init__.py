"""kolo: Horovod-style data-parallel training on one C++ engine.

The PyTorch API lives in :mod:`kolo.torch`. This package holds the compiled
extension (``kolo._kolo``), the error classes shared by every framework
binding, and ``kolo.run`` (horovod.run: a function on every rank of a
kolorun job, results in rank order; ``kolo.runner``).
"""
import sys as _sys

import torch as _torch  # loads libtorch and its Python glue before _kolo

from kolo import _build_config

# _kolo links the LibTorch it was built against; under another torch it
# would fail with undefined symbols or misbehave, so stop here first.
if _torch.__version__ != _build_config.TORCH_VERSION:
    raise ImportError(
        "kolo was built against torch %s, but %s imports torch %s (%s). Rebuild kolo "
        "for this torch: %s" % (
            _build_config.TORCH_VERSION, _sys.executable, _torch.__version__,
            _torch.__file__, _build_config.REBUILD_COMMAND.format(python=_sys.executable)))

from kolo import _kolo  # noqa: E402
from kolo._kolo import (  # noqa: F401,E402
    KoloError,
    KoloInternalError,
    KoloInvalidArgumentError,
    KoloMismatchError,
)

__version__ = _kolo.build_info()["version"]

from kolo.runner import run  # noqa: E402,F401  (horovod.run)
