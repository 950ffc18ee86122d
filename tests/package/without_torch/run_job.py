"""kolo.run (horovod.run) in an environment without torch: a function that
uses the array API on every rank of a 2-rank job; prints "run: ok"."""
import sys

import kolo


def step(scale):
    import numpy as np

    import kolo as k
    k.init()
    try:
        out = k.allreduce(np.full(3, k.rank() + 1.0) * scale, op=k.Sum)
        return k.rank(), out.tolist(), "torch" in sys.modules
    finally:
        k.shutdown()


results = kolo.run(step, args=(2.0,), num_proc=2)
assert results == [(0, [6.0] * 3, False), (1, [6.0] * 3, False)], results
assert "torch" not in sys.modules
print("run: ok")
