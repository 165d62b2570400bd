"""Late records: the event-time gate a task's records pass before the operator sees them.

A record whose event time is at or below the watermark the task started from is **late**: the
timers and windows it could update have fired already. As in Flink's side output for late data
(and Spark's stateful operators, which drop rows behind the watermark and count them as
``numRowsDroppedByWatermark``), late records never touch state: they go to a late-data sink when
the job has one, and are dropped and counted otherwise. A record without an event time (null) is
never late. The gate also tracks the largest event time of the records it let through: the task
reports it, and the driver derives the next watermark from every task's (min over the tasks
that had records, as Flink does over parallel instances).

>>> import pyarrow as pa
>>> late = []
>>> gate = EventTimeGate("ts", watermark=10, on_late=late.append)
>>> batch = pa.record_batch({"ts": pa.array([5, 10, 11, None, 30], pa.int64())})
>>> [b.column("ts").to_pylist() for b in gate.on_time([batch])]
[[11, None, 30]]
>>> gate.late_rows, gate.max_event_time, late[0].column("ts").to_pylist()
(2, 30, [5, 10])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from statecore.backends.timers import MIN_WATERMARK
from statecore.errors import ConfigError

__all__ = ["EventTimeGate", "event_time_array"]


def event_time_array(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Epoch milliseconds (int64) of a timestamp column (an integer column is taken as
    milliseconds; sub-millisecond precision is truncated)."""
    if pa.types.is_timestamp(column.type):
        return pc.cast(pc.cast(column, pa.timestamp("ms", column.type.tz), safe=False), pa.int64())
    if pa.types.is_integer(column.type):
        return pc.cast(column, pa.int64())
    raise ConfigError(
        f"an event-time column must be a timestamp or epoch milliseconds, not {column.type}"
    )


class EventTimeGate:
    """Lets the on-time records of ``column`` through; hands late ones (event time at or below
    ``watermark``) to ``on_late`` (``None``: dropped), counting them in :attr:`late_rows`.

    Without an event-time ``column`` every record passes and nothing is tracked.
    """

    def __init__(
        self,
        column: str | None,
        *,
        watermark: int = MIN_WATERMARK,
        on_late: Callable[[pa.RecordBatch], None] | None = None,
    ) -> None:
        self.column = column
        self.watermark = watermark
        self.on_late = on_late
        self.late_rows = 0
        self.max_event_time: int | None = None
        """The largest event time of the records let through (``None``: none had one)."""

    def on_time(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if self.column is None:
            yield from batches
            return
        for batch in batches:
            times = event_time_array(batch.column(self.column))
            if self.watermark > MIN_WATERMARK:
                late = pc.fill_null(pc.less_equal(times, self.watermark), False)
                count = pc.sum(late).as_py() or 0
                if count:
                    self.late_rows += count
                    if self.on_late is not None:
                        self.on_late(batch.filter(late))
                    keep = pc.invert(late)
                    batch, times = batch.filter(keep), times.filter(keep)
            if batch.num_rows == 0:
                continue
            latest = pc.max(times).as_py()
            if latest is not None and (self.max_event_time is None or latest > self.max_event_time):
                self.max_event_time = latest
            yield batch
