"""kolo.spark: kolo jobs inside a Spark application, shaped like
horovod.spark.

    from pyspark.sql import SparkSession
    import kolo.spark

    def train(lr):
        import kolo.torch as hvd
        hvd.init()
        ...
        return hvd.rank()

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    print(kolo.spark.run(train, args=(0.1,), num_proc=2))     # [0, 1]

Each rank is one task of a Spark barrier stage (barrier execution mode:
all tasks start together, or none). The driver serves kolo's authenticated
rendezvous store; the ranks join the job through it and fetch the function
from it, and put their results there. pyspark's ``TorchDistributor``
needs nothing from this module: it sets torchrun's environment, which
``kolo.torch.init()`` understands (docs/running/spark.md).

PySpark is an optional dependency: ``pip install "kolo[spark]"``.
``import kolo.torch`` never imports it.
"""
from kolo.spark.runner import run  # noqa: F401

__all__ = ["run"]
