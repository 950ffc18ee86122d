"""kolo.ray: kolo jobs on a Ray cluster, shaped like horovod.ray.

Usage::

    import ray
    from kolo.ray import RayExecutor          # was: from horovod.ray import RayExecutor
    import kolo.torch as hvd                  # was: import horovod.torch as hvd

    ray.init()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=4)
    executor.start()
    print(executor.run(train_fn))             # every worker's result, in rank order
    executor.shutdown()

``RayExecutor`` places one Ray actor per worker with a placement group,
serves the job's authenticated rendezvous store from the driver and hands
each actor its rank and the job's secret; ``ElasticRayExecutor`` runs a
``kolo.torch.elastic`` training function that survives the loss of workers
and grows when the cluster does. ``KoloConfig`` is the Ray Train backend:
``DataParallelTrainer(train_loop, backend_config=KoloConfig(), ...)`` with
Ray Train V2's ``ray.train.v2.api.data_parallel_trainer.DataParallelTrainer``
(the default in Ray >= 2.50; the V1 class
``ray.train.data_parallel_trainer.DataParallelTrainer`` works too, with
``RAY_TRAIN_V2_ENABLED=0``). See ``kolo.ray.train``.

Ray is an optional dependency: ``pip install "ray[train]"``. ``import
kolo.torch`` never imports Ray.
"""
from kolo.ray._ray import require_ray as _require_ray

_require_ray()

from kolo.ray.executor import RayExecutor, Settings  # noqa: E402,F401
from kolo.ray.elastic import ElasticRayExecutor  # noqa: E402,F401


def __getattr__(name):
    """``KoloConfig`` and ``KoloBackend``, imported from ``kolo.ray.train``
    on first use (it needs Ray Train, the others need only Ray)."""
    # The Ray Train backend lives in its own module; loaded on first use.
    if name in ("KoloConfig", "KoloBackend"):
        from kolo.ray import train
        return getattr(train, name)
    raise AttributeError("module 'kolo.ray' has no attribute %r" % name)


__all__ = ["ElasticRayExecutor", "KoloConfig", "RayExecutor", "Settings"]
