"""The window operator through the harness (no Spark), on both keyed state backends.

Expected outputs follow Flink's ``WindowOperator`` semantics: a window [start, end) fires when
the watermark reaches ``end - 1`` (event time) or the clock does (processing time), is cleaned
up at ``end - 1 + allowed lateness``, and an element all of whose windows are cleaned up is late.
"""

from __future__ import annotations

import operator
from datetime import timedelta
from typing import Any

import pytest

from statecore.descriptors import AggregateFunction, ValueStateDescriptor
from statecore.errors import ConfigError
from statecore.runtime.functions import OutputTag
from statecore.testing import KeyedProcessFunctionHarness
from statecore.types import PICKLED
from statecore.windows import (
    CountEvictor,
    CountTrigger,
    Evictor,
    GlobalWindow,
    GlobalWindows,
    ProcessWindowFunction,
    PurgingTrigger,
    SessionWindows,
    SlidingWindows,
    TimeEvictor,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingWindows,
    WindowFunction,
    WindowOperator,
    window,
)

BACKENDS = ["heap", "rocksdb"]
SECOND = timedelta(seconds=1)


def harness(op: WindowOperator, backend: str = "heap") -> KeyedProcessFunctionHarness:
    return KeyedProcessFunctionHarness(op, key=operator.itemgetter(0), backend=backend)


def feed(h: KeyedProcessFunctionHarness, *elements: tuple[str, Any, int]) -> list[Any]:
    out: list[Any] = []
    for key, value, timestamp in elements:
        out += h.process_element((key, value), timestamp=timestamp)
    return out


def add_values(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
    return a[0], a[1] + b[1]


class Describe(ProcessWindowFunction):
    """Emits (key, window, sorted values) per firing."""

    def process(self, key: Any, context: Any, elements: Any) -> Any:
        yield key, context.window, sorted(e[1] for e in elements)


class Average(AggregateFunction[Any, Any, Any]):
    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: Any, accumulator: list[int]) -> list[int]:
        return [accumulator[0] + value[1], accumulator[1] + 1]

    def get_result(self, accumulator: list[int]) -> float:
        return accumulator[0] / accumulator[1]

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0], a[1] + b[1]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_tumbling_reduce_fires_when_the_watermark_passes(backend: str) -> None:
    op = window(TumblingWindows(size=5 * SECOND), element_type=PICKLED).reduce(add_values)
    with harness(op, backend) as h:
        assert feed(h, ("a", 1, 1000), ("a", 2, 4000), ("b", 5, 4999), ("a", 7, 5000)) == []
        assert h.advance_watermark(4998) == []
        assert sorted(h.advance_watermark(4999)) == [("a", 3), ("b", 5)]
        assert h.end_input() == [("a", 7)]
        assert h.timers() == []
        assert h.keys("window_contents", "TimeWindow(0, 5000)") == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_keeps_each_window_in_a_readable_namespace(backend: str) -> None:
    op = window(TumblingWindows(size=5 * SECOND), element_type=int).reduce(operator.add)
    with KeyedProcessFunctionHarness(op, key=lambda v: "k", backend=backend) as h:
        h.process_element(3, timestamp=1000)
        h.process_element(4, timestamp=6000)
        assert h.state("window_contents", "k", namespace="TimeWindow(0, 5000)") == 3
        assert h.state("window_contents", "k", namespace="TimeWindow(5000, 10000)") == 4
        assert [(t.namespace, t.timestamp) for t in h.timers()] == [
            ("TimeWindow(0, 5000)", 4999),
            ("TimeWindow(5000, 10000)", 9999),
        ]


def test_window_operator_sliding_windows_hold_each_element_size_over_slide_times() -> None:
    assigner = SlidingWindows(size=10 * SECOND, slide=5 * SECOND)
    op = window(assigner, element_type=PICKLED).process(Describe())
    with harness(op) as h:
        feed(h, ("a", 1, 3000), ("a", 2, 7000), ("a", 4, 12000))
        assert h.end_input() == [
            ("a", TimeWindow(-5000, 5000), [1]),
            ("a", TimeWindow(0, 10000), [1, 2]),
            ("a", TimeWindow(5000, 15000), [2, 4]),
            ("a", TimeWindow(10000, 20000), [4]),
        ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_session_windows_merge_their_state(backend: str) -> None:
    op = window(SessionWindows(gap=3 * SECOND), element_type=PICKLED).process(Describe())
    with harness(op, backend) as h:
        feed(h, ("a", 1, 1000), ("a", 2, 3000), ("b", 9, 2000), ("a", 3, 10000))
        assert h.state("window_merging", "a") == {
            "TimeWindow(1000, 6000)": "TimeWindow(1000, 4000)",
            "TimeWindow(10000, 13000)": "TimeWindow(10000, 13000)",
        }
        assert h.state("window_contents", "a", namespace="TimeWindow(1000, 4000)") == [
            ("a", 1),
            ("a", 2),
        ]
        assert sorted(h.advance_watermark(5999)) == [
            ("a", TimeWindow(1000, 6000), [1, 2]),
            ("b", TimeWindow(2000, 5000), [9]),
        ]
        assert h.end_input() == [("a", TimeWindow(10000, 13000), [3])]
        assert h.keys("window_merging") == []
        assert h.timers() == []


def test_window_operator_session_element_bridging_two_sessions_merges_three_windows() -> None:
    op = window(SessionWindows(gap=2 * SECOND), element_type=PICKLED).reduce(add_values)
    with harness(op) as h:
        feed(h, ("a", 1, 1000), ("a", 10, 4000), ("a", 100, 2500))
        assert h.state("window_merging", "a") == {
            "TimeWindow(1000, 6000)": "TimeWindow(1000, 3000)"
        }
        # one cleanup timer is left: the merged window's (the merged-away ones were deleted)
        assert [(t.namespace, t.timestamp) for t in h.timers()] == [
            ("TimeWindow(1000, 6000)", 5999)
        ]
        assert h.end_input() == [("a", 111)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_count_window_fires_and_purges_every_n(backend: str) -> None:
    trigger = PurgingTrigger(CountTrigger(3))
    op = window(GlobalWindows(), element_type=PICKLED, trigger=trigger).reduce(add_values)
    with harness(op, backend) as h:
        out = feed(h, *[("a", i, i) for i in range(1, 8)], ("b", 100, 1))
        assert out == [("a", 6), ("a", 15)]
        assert h.state("window_contents", "a", namespace="GlobalWindow") == ("a", 7)
        assert h.state("window_trigger_count", "a", namespace="GlobalWindow") == 1
        assert h.end_input() == []  # a global window never ends
        assert h.timers() == []


def test_window_operator_count_trigger_without_purge_fires_everything_so_far() -> None:
    op = window(GlobalWindows(), element_type=PICKLED, trigger=CountTrigger(2)).process(Describe())
    with harness(op) as h:
        out = feed(h, *[("a", i, i) for i in range(1, 6)])
        assert out == [("a", GlobalWindow(), [1, 2]), ("a", GlobalWindow(), [1, 2, 3, 4])]


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_aggregate_with_a_process_window_function(backend: str) -> None:
    class Labelled(ProcessWindowFunction):
        def process(self, key: Any, context: Any, elements: Any) -> Any:
            (average,) = elements
            yield key, context.window.start, average

    op = window(TumblingWindows(size=SECOND), element_type=PICKLED).aggregate(
        Average(), accumulator_type=PICKLED, function=Labelled()
    )
    with harness(op, backend) as h:
        feed(h, ("a", 1, 100), ("a", 2, 200), ("a", 6, 900), ("a", 10, 1500))
        assert h.state("window_contents", "a", namespace="TimeWindow(0, 1000)") == 3.0
        assert h.end_input() == [("a", 0, 3.0), ("a", 1000, 10.0)]


def test_window_operator_aggregate_alone_emits_the_result() -> None:
    op = window(SessionWindows(gap=SECOND), element_type=PICKLED).aggregate(
        Average(), accumulator_type=PICKLED
    )
    with harness(op) as h:
        feed(h, ("a", 2, 0), ("a", 4, 900), ("a", 9, 5000))
        assert h.end_input() == [3.0, 9.0]


def test_window_operator_reduce_with_a_process_window_function() -> None:
    class WithEnd(ProcessWindowFunction):
        def process(self, key: Any, context: Any, elements: Any) -> Any:
            yield context.window.end, next(iter(elements))[1], context.current_watermark

    op = window(TumblingWindows(size=SECOND), element_type=PICKLED).reduce(
        add_values, function=WithEnd()
    )
    with harness(op) as h:
        feed(h, ("a", 1, 100), ("a", 2, 200))
        assert h.advance_watermark(1500) == [(1000, 3, 1500)]


def test_window_operator_apply_a_window_function() -> None:
    class Count(WindowFunction):
        def apply(self, key: Any, window: Any, inputs: Any) -> Any:
            yield key, window.start, window.end, len(list(inputs))

    op = window(TumblingWindows(size=SECOND), element_type=PICKLED).apply(Count())
    with harness(op) as h:
        feed(h, ("a", 1, 100), ("a", 2, 200), ("b", 3, 300))
        assert sorted(h.end_input()) == [("a", 0, 1000, 2), ("b", 0, 1000, 1)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_allowed_lateness_refires_then_cleans_up(backend: str) -> None:
    windowing = window(
        TumblingWindows(size=SECOND), element_type=PICKLED, allowed_lateness=2 * SECOND
    )
    op = windowing.reduce(add_values)
    with harness(op, backend) as h:
        feed(h, ("a", 1, 100))
        assert h.advance_watermark(1000) == [("a", 1)]
        # late, but within the allowed lateness: the window fires again with it
        assert feed(h, ("a", 5, 200)) == [("a", 6)]
        assert h.state("window_contents", "a", namespace="TimeWindow(0, 1000)") == ("a", 6)
        assert h.advance_watermark(2999) == []  # the cleanup timer at 999 + 2000
        assert h.keys("window_contents", "TimeWindow(0, 1000)") == []
        assert feed(h, ("a", 7, 300)) == []  # too late: dropped
        assert op.late_records_dropped == 1
        assert h.timers() == []


def test_window_operator_drops_late_elements_without_allowed_lateness() -> None:
    op = window(TumblingWindows(size=SECOND), element_type=PICKLED).reduce(add_values)
    with harness(op) as h:
        h.advance_watermark(5000)
        assert feed(h, ("a", 1, 4000), ("a", 2, 5000), ("a", 3, 5001)) == []
        assert op.late_records_dropped == 1  # 4000 only: [5000, 6000) is open at 5000
        assert h.end_input() == [("a", 5)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_late_data_goes_to_its_side_output(backend: str) -> None:
    tag = OutputTag("late")
    op = window(TumblingWindows(size=SECOND), element_type=PICKLED, late_data=tag).reduce(
        add_values
    )
    with harness(op, backend) as h:
        h.advance_watermark(5000)
        assert feed(h, ("a", 1, 4000), ("b", 2, 5500), ("a", 3, 3999)) == []
        assert op.late_records_dropped == 0
        assert h.end_input() == [("b", 2)]
        assert [v[:2] for v in h.side_output(tag)] == [("a", 1), ("a", 3)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_processing_time_tumbling_windows(backend: str) -> None:
    assigner = TumblingWindows(size=SECOND, processing_time=True)
    op = window(assigner, element_type=PICKLED).process(Describe())
    with harness(op, backend) as h:
        h.set_processing_time(100)
        feed(h, ("a", 1, 99999), ("a", 2, 5))  # event times play no part
        h.set_processing_time(1200)
        feed(h, ("a", 3, 0))
        assert h.end_input() == []  # the watermark does not fire processing-time windows
        assert h.set_processing_time(2000) == [("a", TimeWindow(1000, 2000), [3])]
        assert h.output == [("a", TimeWindow(0, 1000), [1, 2]), ("a", TimeWindow(1000, 2000), [3])]


def test_window_operator_processing_time_session_windows_merge() -> None:
    assigner = SessionWindows(gap=SECOND, processing_time=True)
    op = window(assigner, element_type=PICKLED).reduce(add_values)
    with harness(op) as h:
        feed(h, ("a", 1, 0))
        h.set_processing_time(800)
        feed(h, ("a", 2, 0))
        assert h.set_processing_time(1500) == []
        assert h.set_processing_time(1799) == [("a", 3)]
        assert h.timers() == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_count_evictor_keeps_the_last_elements(backend: str) -> None:
    trigger = CountTrigger(3)
    op = window(GlobalWindows(), element_type=int, trigger=trigger, evictor=CountEvictor(2)).reduce(
        operator.add
    )
    with KeyedProcessFunctionHarness(op, key=lambda v: "k", backend=backend) as h:
        assert h.process_elements([1, 2, 3, 4, 5, 6], [0] * 6) == [5, 11]
        # the evicted elements left the window's state; each with its timestamp
        assert h.state("window_contents", "k", namespace="GlobalWindow") == [
            {"value": 5, "timestamp": 0},
            {"value": 6, "timestamp": 0},
        ]


def test_window_operator_count_evictor_after_the_function() -> None:
    op = window(
        GlobalWindows(),
        element_type=int,
        trigger=CountTrigger(2),
        evictor=CountEvictor(1, after=True),
    ).apply(Collect())
    with KeyedProcessFunctionHarness(op, key=lambda v: "k") as h:
        assert h.process_elements([1, 2, 3, 4], [0] * 4) == [[1, 2], [2, 3, 4]]


class Collect(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        yield list(inputs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_time_evictor_keeps_recent_elements(backend: str) -> None:
    op = window(
        TumblingWindows(size=10 * SECOND), element_type=int, evictor=TimeEvictor(keep=2 * SECOND)
    ).apply(Collect())
    with KeyedProcessFunctionHarness(op, key=lambda v: "k", backend=backend) as h:
        h.process_elements([1, 2, 3, 4], [1000, 6000, 7000, 8500])
        assert h.end_input() == [[3, 4]]


def test_window_operator_custom_evictor() -> None:
    class DropNegative(Evictor):
        def evict_before(self, elements: Any, window: Any, ctx: Any) -> None:
            elements[:] = [e for e in elements if e.value >= 0]

    op = window(TumblingWindows(size=SECOND), element_type=int, evictor=DropNegative()).reduce(
        operator.add
    )
    with KeyedProcessFunctionHarness(op, key=lambda v: "k") as h:
        h.process_elements([5, -100, 7], [1, 2, 3])
        assert h.end_input() == [12]


class FireAtSum(Trigger):
    """Fires (and purges) once a window's values reach a sum; the running sum is trigger state."""

    SUM = ValueStateDescriptor("trigger_sum", int, default=0)

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        total = ctx.get_partitioned_state(self.SUM)
        total.update(total.value() + element[1])
        if total.value() >= self.limit:
            total.clear()
            return TriggerResult.FIRE_AND_PURGE
        ctx.register_event_time_timer(window.max_timestamp)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.get_partitioned_state(self.SUM).clear()
        ctx.delete_event_time_timer(window.max_timestamp)


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_custom_trigger_with_trigger_state(backend: str) -> None:
    op = window(TumblingWindows(size=SECOND), element_type=PICKLED, trigger=FireAtSum(10)).reduce(
        add_values
    )
    with harness(op, backend) as h:
        assert feed(h, ("a", 4, 1), ("a", 8, 2), ("a", 1, 3)) == [("a", 12)]
        assert h.state("trigger_sum", "a", namespace="TimeWindow(0, 1000)") == 1
        assert h.advance_watermark(999) == [("a", 1)]
        assert h.keys("trigger_sum", "TimeWindow(0, 1000)") == []


def test_window_operator_session_merge_merges_count_trigger_state() -> None:
    op = window(
        SessionWindows(gap=2 * SECOND), element_type=PICKLED, trigger=CountTrigger(3)
    ).process(Describe())
    with harness(op) as h:
        assert feed(h, ("a", 1, 0), ("a", 2, 3000)) == []
        # the bridging element merges both sessions: their counts (1 + 1) and its own make 3
        assert feed(h, ("a", 3, 1500)) == [("a", TimeWindow(0, 5000), [1, 2, 3])]


def test_window_operator_merging_needs_a_trigger_that_can_merge() -> None:
    class Plain(Trigger):
        def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
            return TriggerResult.CONTINUE

    op = window(SessionWindows(gap=SECOND), element_type=PICKLED, trigger=Plain()).reduce(
        add_values
    )
    with harness(op) as h:
        feed(h, ("a", 1, 0))
        with pytest.raises(ConfigError, match="does not support merging"):
            feed(h, ("a", 2, 500))


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_open_windows_survive_a_snapshot_and_restore(backend: str) -> None:
    other = "rocksdb" if backend == "heap" else "heap"

    def session() -> WindowOperator:
        return window(SessionWindows(gap=2 * SECOND), element_type=PICKLED).process(Describe())

    with harness(session(), backend) as h:
        feed(h, ("a", 1, 1000), ("a", 2, 2000), ("b", 5, 1500))
        saved = h.snapshot()
    with KeyedProcessFunctionHarness(
        session(), key=operator.itemgetter(0), backend=other, restore=saved
    ) as restored:
        feed(restored, ("a", 3, 3500))
        assert sorted(restored.end_input()) == [
            ("a", TimeWindow(1000, 5500), [1, 2, 3]),
            ("b", TimeWindow(1500, 3500), [5]),
        ]


def test_window_operator_process_window_function_per_window_state_is_cleared() -> None:
    FIRINGS = ValueStateDescriptor("firings", int, default=0)
    TOTAL = ValueStateDescriptor("all_firings", int, default=0)

    class CountFirings(ProcessWindowFunction):
        def process(self, key: Any, context: Any, elements: Any) -> Any:
            firings = context.window_state.get_state(FIRINGS)
            firings.update(firings.value() + 1)
            total = context.global_state.get_state(TOTAL)
            total.update(total.value() + 1)
            yield context.window.start, firings.value(), total.value()

        def clear(self, context: Any) -> None:
            context.window_state.get_state(FIRINGS).clear()

    op = window(
        TumblingWindows(size=SECOND), element_type=PICKLED, allowed_lateness=SECOND
    ).process(CountFirings())
    with harness(op) as h:
        feed(h, ("a", 1, 100))
        assert h.advance_watermark(999) == [(0, 1, 1)]
        assert feed(h, ("a", 2, 200)) == [(0, 2, 2)]
        feed(h, ("a", 3, 1100))
        assert h.advance_watermark(1999) == [(1000, 1, 3)]
        assert h.keys("firings", "TimeWindow(0, 1000)") == []
        assert h.state("all_firings", "a") == 3


def test_window_operator_event_time_windows_need_timestamps() -> None:
    op = window(TumblingWindows(size=SECOND), element_type=PICKLED).reduce(add_values)
    with harness(op) as h, pytest.raises(ConfigError, match="no timestamp"):
        h.process_element(("a", 1))


@pytest.mark.parametrize(
    "make",
    [
        lambda: TumblingWindows(size=timedelta(0)),
        lambda: TumblingWindows(size=SECOND, offset=2 * SECOND),
        lambda: SlidingWindows(size=SECOND, slide=timedelta(0)),
        lambda: SessionWindows(gap=-SECOND),
        lambda: CountTrigger(0),
        lambda: CountEvictor(-1),
        lambda: window(GlobalWindows(), element_type=int, allowed_lateness=-SECOND),
        lambda: window("tumbling", element_type=int),  # type: ignore[arg-type]
        lambda: window(GlobalWindows(), element_type=int).process(lambda *a: a),  # type: ignore[arg-type]
        lambda: window(GlobalWindows(), element_type=int).aggregate(sum, accumulator_type=int),  # type: ignore[arg-type]
    ],
)
def test_window_operator_rejects_bad_configuration(make: Any) -> None:
    with pytest.raises(ConfigError):
        make()


def test_window_operator_tumbling_offset_shifts_windows() -> None:
    assigner = TumblingWindows(size=timedelta(hours=1), offset=timedelta(minutes=15))
    assert assigner.assign_windows(0, now=0) == [TimeWindow(-2_700_000, 900_000)]
