"""The PySpark runtime (``pyspark`` is used only here and in ``jobs/``).

The driver API (``keyed_process`` and its side outputs' ``SideOutput``,
``keyed_process_batches``, ``keyed_co_process``, ``non_keyed_process`` (a ``ProcessFunction``
over a stream without a key), ``keyed_stream``, ``keyed_stream_batches``,
``savepoint_offsets``; ``build_session``, statecore's one Spark session builder;
``state_views``, Spark SQL over a checkpoint's state) loads on first use, so a Spark task's
Python worker, which imports only :mod:`statecore.spark.executor`, never loads the driver's
catalog and planning code.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statecore.spark.co_process import keyed_co_process
    from statecore.spark.keyed import KeyedRun, SideOutput, keyed_process, keyed_process_batches
    from statecore.spark.non_keyed import non_keyed_process
    from statecore.spark.session import build_session
    from statecore.spark.sql import state_views
    from statecore.spark.stream import keyed_stream, keyed_stream_batches, savepoint_offsets

__all__ = [
    "KeyedRun",
    "SideOutput",
    "keyed_process",
    "keyed_process_batches",
    "keyed_co_process",
    "non_keyed_process",
    "keyed_stream",
    "keyed_stream_batches",
    "savepoint_offsets",
    "build_session",
    "state_views",
]


def __getattr__(name: str) -> Any:
    if name == "build_session":
        from statecore.spark import session

        return session.build_session
    if name == "state_views":
        from statecore.spark import sql

        return sql.state_views
    if name == "keyed_co_process":
        from statecore.spark import co_process

        return co_process.keyed_co_process
    if name == "non_keyed_process":
        from statecore.spark import non_keyed

        return non_keyed.non_keyed_process
    if name in ("keyed_stream", "keyed_stream_batches", "savepoint_offsets"):
        from statecore.spark import stream

        return getattr(stream, name)
    if name in __all__:
        from statecore.spark import keyed

        return getattr(keyed, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
