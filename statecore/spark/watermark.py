"""Event time on the driver: the event-time column, and the watermark a run completes with.

See :mod:`statecore.spark.keyed` for how the watermark belongs to the checkpoint.
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from statecore.backends.timers import MIN_WATERMARK
from statecore.errors import ConfigError

__all__ = ["event_time_column", "lateness_ms", "next_watermark", "run_watermark"]


def event_time_column(df: DataFrame, event_time: str) -> Column:
    """The event-time column as epoch milliseconds; :class:`ConfigError` if it is missing or
    neither a timestamp nor an integer."""
    if event_time not in df.columns:
        raise ConfigError(f"event-time column {event_time!r} is not in {df.columns}")
    data_type = df.schema[event_time].dataType
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
        return F.unix_millis(F.col(event_time).cast("timestamp"))
    if isinstance(data_type, T.LongType | T.IntegerType):
        return F.col(event_time)
    raise ConfigError(
        f"event-time column {event_time!r} has type "
        f"{data_type.simpleString()}; use a timestamp or epoch milliseconds"
    )


def lateness_ms(allowed_lateness: timedelta) -> int:
    """``allowed_lateness`` in milliseconds."""
    return int(allowed_lateness / timedelta(milliseconds=1))


def next_watermark(
    restored: int, max_event_times: list[int | None], allowed_lateness: timedelta
) -> int:
    """Spark's rule for the watermark a micro-batch completes with: the smallest of the tasks'
    largest event times (a task without records does not hold it back, as an idle Flink
    instance) minus ``allowed_lateness``, never below the ``restored`` one.

    >>> next_watermark(100, [300, None, 250], timedelta(milliseconds=50))
    200
    >>> next_watermark(100, [None], timedelta(0))
    100
    """
    seen = [t for t in max_event_times if t is not None]
    if not seen:
        return restored
    return max(restored, min(seen) - lateness_ms(allowed_lateness))


def run_watermark(df: DataFrame, event_time: str | None, allowed_lateness: timedelta) -> int:
    """The run's largest event time (epoch ms) minus the allowed lateness."""
    if event_time is None:
        return MIN_WATERMARK
    column = event_time_column(df, event_time)
    latest = df.agg(F.max(column)).first()
    if latest is None or latest[0] is None:
        return MIN_WATERMARK
    return int(latest[0]) - lateness_ms(allowed_lateness)
