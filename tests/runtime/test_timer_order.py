"""Timers fire between records: with an event time, the task advances the watermark after each
record that raised the largest event time seen (to it minus the allowed lateness minus 1 ms, as a
Flink source's bounded-out-of-orderness watermark) and fires the timers it passes before the next
record, in timestamp order, on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from statecore import (
    MIN_WATERMARK,
    Context,
    KeyedProcessFunction,
    OnTimerContext,
    RuntimeContext,
    ValueStateDescriptor,
)
from statecore.testing import KeyedProcessFunctionHarness

GAP = 5000


class Sessions(KeyedProcessFunction):
    """Counts a key's records; its session closes GAP ms of event time after its last one."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))
        self.last = ctx.get_state(ValueStateDescriptor("last", int))

    def process_element(self, value: Any, ctx: Context) -> Iterator[Any]:
        assert ctx.timestamp is not None
        self.count.update(self.count.value() + 1)
        self.last.update(ctx.timestamp)
        ctx.timer_service.register_event_time_timer(ctx.timestamp + GAP)
        yield "record", ctx.current_key, ctx.timestamp, ctx.timer_service.current_watermark()

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[Any]:
        if timestamp == (self.last.value() or 0) + GAP:
            yield "closed", ctx.current_key, timestamp, self.count.value()
            self.count.clear()
            self.last.clear()


def _batch(rows: list[tuple[str, int]]) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "user": pa.array([r[0] for r in rows]),
            "ts": pa.array([r[1] for r in rows], pa.int64()),
            "kg": pa.nulls(len(rows), pa.int32()),  # the backend computes the key groups
        }
    )


def _process(harness: KeyedProcessFunctionHarness, batch: pa.RecordBatch, lateness: int) -> Any:
    return harness.task.process_batch(
        batch, key="user", key_group="kg", event_time="ts", lateness_ms=lateness
    )


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_timer_order_fires_between_records_before_the_first_record_past_it(backend: str) -> None:
    with KeyedProcessFunctionHarness(Sessions(), key="user", backend=backend) as harness:
        out = _process(harness, _batch([("a", 1000), ("b", 2000), ("c", 7000), ("a", 8000)]), 0)
        assert out == [
            ("record", "a", 1000, MIN_WATERMARK),
            ("record", "b", 2000, 999),
            ("record", "c", 7000, 1999),
            ("closed", "a", 6000, 1),  # watermark 6999 passed a's session: closed before a@8000
            ("record", "a", 8000, 6999),  # a new session
            ("closed", "b", 7000, 1),  # 7999 passed b's: it fires at once, before any next record
        ]
        out = _process(harness, _batch([("c", 8002), ("c", 8003)]), 0)  # the next batch goes on
        assert out == [("record", "c", 8002, 7999), ("record", "c", 8003, 8001)]
        assert harness.watermark == 8002


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_timer_order_watermark_trails_by_the_allowed_lateness(backend: str) -> None:
    with KeyedProcessFunctionHarness(Sessions(), key="user", backend=backend) as harness:
        out = _process(harness, _batch([("a", 1000), ("b", 6500), ("b", 7001), ("b", 7002)]), 500)
        closed = [(o[1], o[2]) for o in out if o[0] == "closed"]
        assert closed == [("a", 6000)]
        assert [o for o in out if o[0] == "record"][-1] == ("record", "b", 7002, 6500)
        # a's timer (6000) waits for the watermark 7001 - 500 - 1 = 6500, after b@7001.
        assert out.index(("closed", "a", 6000, 1)) == 3


def test_timer_order_timers_due_at_once_fire_in_timestamp_order() -> None:
    with KeyedProcessFunctionHarness(Sessions(), key="user") as harness:
        out = _process(harness, _batch([("c", 3000), ("a", 1000), ("b", 2000), ("d", 20_000)]), 0)
        closed = [(o[1], o[2]) for o in out if o[0] == "closed"]
        # the records come unsorted here (Spark sorts them by event time): the watermark follows
        # the largest event time seen, so a's and b's records are not behind it, and every
        # session closes once d@20000 moved the watermark to 19999, earliest first.
        assert closed == [("a", 6000), ("b", 7000), ("c", 8000)]
        assert out[-3:] == [
            ("closed", "a", 6000, 1),
            ("closed", "b", 7000, 1),
            ("closed", "c", 8000, 1),
        ]
