"""A kolo.ray job in an environment without torch: RayExecutor on a local
Ray cluster, 2 workers, the array API in each; prints "ray: ok"."""
import os
import sys

import ray

import kolo.ray


def step():
    import numpy as np

    import kolo as k
    k.init()
    out = k.allgather(np.array([k.rank()], dtype=np.int64))
    return k.rank(), out.tolist(), "torch" in sys.modules


os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 * 1024,
         logging_level="WARNING")
try:
    settings = kolo.ray.RayExecutor.create_settings(timeout_s=60)
    executor = kolo.ray.RayExecutor(settings, num_workers=2, cpus_per_worker=1)
    executor.start()
    try:
        results = executor.run(step)
    finally:
        executor.shutdown()
finally:
    ray.shutdown()
assert sorted(results) == [(0, [0, 1], False), (1, [0, 1], False)], results
assert "torch" not in sys.modules
print("ray: ok")
