"""kolo.torch.process_sets: the framework-free kolo.common.process_sets
itself (one module object under both names), so a ProcessSet made through
either API works with both."""
import sys as _sys

from kolo.common import process_sets as _common

_sys.modules[__name__] = _common
