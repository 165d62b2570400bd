"""Processing-time windows at the end of a batch, as Flink's BATCH mode fires them: every
processing-time timer of a task fires at the end of input, after the event-time ones
(``KeyedOperatorTask.fire_processing_timers``, what ``keyed_process(end_of_input=True,
processing_timers_at_end=True)`` runs at the end of each task)."""

from __future__ import annotations

import operator
from datetime import timedelta
from typing import Any

import pytest

from statecore.runtime.functions import KeyedProcessFunction
from statecore.testing import KeyedProcessFunctionHarness
from statecore.types import PICKLED
from statecore.windows import SessionWindows, TumblingWindows, window

HOUR = timedelta(hours=1)


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_window_operator_processing_time_windows_fire_at_the_end_of_a_batch(backend: str) -> None:
    tumbling = window(TumblingWindows(size=HOUR, processing_time=True), element_type=PICKLED)
    sessions = window(SessionWindows(gap=HOUR, processing_time=True), element_type=PICKLED)
    for windowing in (tumbling, sessions):
        function = windowing.reduce(lambda x, y: (x[0], x[1] + y[1]))
        key = operator.itemgetter(0)
        with KeyedProcessFunctionHarness(function, key=key, backend=backend) as harness:
            for element in [("a", 1), ("b", 10), ("a", 2)]:
                harness.process_element(element)
            assert harness.set_processing_time(1_000) == []  # the windows end in an hour
            assert sorted(harness.task.fire_processing_timers()) == [("a", 3), ("b", 10)]
            assert harness.timers() == []  # the cleanup timers fired with them


class Chain(KeyedProcessFunction):
    """Registers a processing-time timer at each element's value; a firing timer registers
    another, earlier or later than the latest pending one."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        ctx.timer_service.register_processing_time_timer(value[1])

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield timestamp
        if timestamp == 100:
            ctx.timer_service.register_processing_time_timer(500)  # after the latest: stays
        if timestamp == 200:
            ctx.timer_service.register_processing_time_timer(150)  # before it: fires too


def test_window_operator_processing_timers_at_end_fire_up_to_the_latest_pending() -> None:
    with KeyedProcessFunctionHarness(Chain(), key=operator.itemgetter(0)) as harness:
        for element in [("k", 100), ("k", 300), ("k", 200)]:
            harness.process_element(element)
        assert harness.task.fire_processing_timers() == [100, 200, 150, 300]
        assert [t.timestamp for t in harness.timers()] == [500]
        assert harness.task.fire_processing_timers() == [500]
        assert harness.task.fire_processing_timers() == []
