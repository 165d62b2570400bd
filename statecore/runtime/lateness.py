"""Late records: the event-time gate a task's records pass before the operator sees them.

A record whose event time is at or below the watermark the task started from is **late**: the
timers it could have updated have fired already. What happens to it is the job's
:class:`LateData` choice. By default (``process``) it reaches ``process_element`` like any other
record, as in Flink, whose ``KeyedProcessFunction`` gets every record and decides itself
(``ctx.timestamp`` against ``ctx.timer_service.current_watermark()``); only windows drop. The
statecore extensions keep late records away from state: ``drop`` drops and counts them (as
Spark's stateful operators do, ``numRowsDroppedByWatermark``), ``table`` appends them to a
late-data table (Flink's side output for late data). Late records are counted in every mode. A
record without an event time (null) is never late. The gate also tracks the largest event time
of the on-time records: the task reports it, and the driver derives the next watermark from
every task's (min over the tasks that had records, as Flink does over parallel instances).

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

import enum
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from statecore.backends.timers import MIN_WATERMARK
from statecore.errors import ConfigError

__all__ = ["EventTimeGate", "LateData", "event_time_array"]


class LateData(enum.Enum):
    """What a job does with late records (see the module docstring)."""

    PROCESS = "process"
    """They reach ``process_element`` (Flink's behaviour; the default)."""
    DROP = "drop"
    """Dropped before the function and counted."""
    TABLE = "table"
    """Appended to the job's late-data table, exactly once with the checkpoint."""

    @classmethod
    def of(
        cls, value: LateData | str | None, *, late_output_table: str | None, job: str
    ) -> LateData:
        """``value`` checked against ``late_output_table``: ``None`` is ``table`` with a
        late-data table and ``process`` without one."""
        if value is None:
            return cls.PROCESS if late_output_table is None else cls.TABLE
        try:
            mode = cls(value)
        except ValueError:
            raise ConfigError(
                f"job {job!r}: late_data={value!r} is not one of "
                f"{', '.join(repr(m.value) for m in cls)}"
            ) from None
        if (mode is cls.TABLE) != (late_output_table is not None):
            raise ConfigError(
                f"job {job!r}: late_data='table' and late_output_table= go together "
                f"(late_data={mode.value!r}, late_output_table={late_output_table!r})"
            )
        return mode


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
    ``watermark``) to ``on_late`` (``None``: dropped), or with ``keep_late`` lets them through
    too, counting them in :attr:`late_rows` either way.

    Without an event-time ``column`` every record passes and nothing is tracked.
    """

    def __init__(
        self,
        column: str | None,
        *,
        watermark: int = MIN_WATERMARK,
        on_late: Callable[[pa.RecordBatch], None] | None = None,
        keep_late: bool = False,
    ) -> None:
        self.column = column
        self.watermark = watermark
        self.on_late = on_late
        self.keep_late = keep_late
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
                    if self.keep_late:
                        times = times.filter(pc.invert(late))  # the max of on-time records
                        self._track(times)
                        yield batch
                        continue
                    if self.on_late is not None:
                        self.on_late(batch.filter(late))
                    keep = pc.invert(late)
                    batch, times = batch.filter(keep), times.filter(keep)
            if batch.num_rows == 0:
                continue
            self._track(times)
            yield batch

    def _track(self, times: pa.Array) -> None:
        latest = pc.max(times).as_py() if len(times) else None
        if latest is not None and (self.max_event_time is None or latest > self.max_event_time):
            self.max_event_time = latest
