"""The PySpark runtime (``pyspark`` is used only here and in ``jobs/``)."""

from statecore.spark.keyed import KeyedRun, keyed_process

__all__ = ["KeyedRun", "keyed_process"]
