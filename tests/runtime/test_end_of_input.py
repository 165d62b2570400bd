"""The end of a bounded input in the harness (Flink's final ``Long.MAX_VALUE`` watermark): every
pending event-time timer fires, processing-time timers stay pending, nothing may follow."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from typing import Any

import pytest

from statecore import (
    MAX_WATERMARK,
    Context,
    KeyedProcessFunction,
    OnTimerContext,
    RuntimeContext,
    TimeDomain,
    ValueStateDescriptor,
)
from statecore.errors import ConfigError
from statecore.testing import KeyedProcessFunctionHarness

Click = namedtuple("Click", "user")
GAP = 30 * 60_000


class Sessions(KeyedProcessFunction):
    """Counts a user's clicks; a session closes 30 minutes (event time) after its last click,
    and a processing-time reminder an hour after the first."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))
        self.last = ctx.get_state(ValueStateDescriptor("last", int))

    def process_element(self, click: Any, ctx: Context) -> Iterator[Any]:
        assert ctx.timestamp is not None
        if self.count.value() == 0:
            now = ctx.timer_service.current_processing_time()
            ctx.timer_service.register_processing_time_timer(now + 3_600_000)
        previous = self.last.value()
        if previous is not None:
            ctx.timer_service.delete_event_time_timer(previous + GAP)
        self.count.update(self.count.value() + 1)
        self.last.update(ctx.timestamp)
        ctx.timer_service.register_event_time_timer(ctx.timestamp + GAP)
        return iter(())

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[Any]:
        if ctx.time_domain is TimeDomain.EVENT_TIME:
            yield ctx.current_key, self.count.value()
            self.count.clear()
            self.last.clear()


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_end_of_input_fires_every_event_time_timer_in_order(backend: str) -> None:
    with KeyedProcessFunctionHarness(Sessions(), key="user", backend=backend) as harness:
        harness.process_elements(
            [Click("a"), Click("b"), Click("a"), Click("c")],
            timestamps=[0, 60_000, 120_000, 10**12],
        )
        assert harness.advance_watermark(10**6) == []  # more input may follow: all still open
        assert harness.end_input() == [("b", 1), ("a", 2), ("c", 1)]  # timestamp order
        assert harness.watermark == MAX_WATERMARK
        assert harness.timers(TimeDomain.EVENT_TIME) == []
        assert sorted(t.key for t in harness.timers(TimeDomain.PROCESSING_TIME)) == ["a", "b", "c"]
        with pytest.raises(ConfigError, match="the input ended"):
            harness.process_element(Click("a"), timestamp=10**12 + 1)
        assert harness.end_input() == []  # ending twice fires nothing more


def test_end_of_input_survives_a_snapshot() -> None:
    with KeyedProcessFunctionHarness(Sessions(), key="user") as harness:
        harness.process_element(Click("a"), timestamp=5)
        harness.end_input()
        snapshot = harness.snapshot()
    with KeyedProcessFunctionHarness(Sessions(), key="user", restore=snapshot) as restored:
        assert restored.watermark == MAX_WATERMARK
        with pytest.raises(ConfigError, match="the input ended"):
            restored.process_element(Click("b"), timestamp=6)


def test_end_of_input_watermark_shows_as_words_not_an_overflow() -> None:
    from statecore.cli.output import watermark_time
    from statecore.ops.overview import _watermark_at

    assert watermark_time(MAX_WATERMARK) == "end of input"
    assert _watermark_at(MAX_WATERMARK) == "end of input"
    assert watermark_time(0) is not None and _watermark_at(0) is not None
