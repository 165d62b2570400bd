"""PyFlink's window spellings (statecore.pyflink.datastream.window, WindowedStream) build
statecore's window operator; the operator a plan holds runs in the harness (no Spark), with
PyFlink's windows, contexts and custom triggers. Expected outputs follow Flink's semantics
(a window [start, end) fires when the watermark reaches end - 1)."""

from __future__ import annotations

from typing import Any

import pytest

from statecore.errors import PyFlinkUnsupportedError
from statecore.pyflink.common import Time, Types
from statecore.pyflink.datastream import OutputTag, StreamExecutionEnvironment
from statecore.pyflink.datastream.functions import ProcessWindowFunction, WindowFunction
from statecore.pyflink.datastream.state import ValueStateDescriptor
from statecore.pyflink.datastream.window import (
    CountTrigger,
    EventTimeTrigger,
    GlobalWindows,
    ProcessingTimeSessionWindows,
    PurgingTrigger,
    SlidingProcessingTimeWindows,
    TimeEvictor,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from statecore.testing import KeyedProcessFunctionHarness

BACKENDS = ["heap", "rocksdb"]


def keyed() -> Any:
    env = StreamExecutionEnvironment.get_execution_environment()
    ds = env.from_collection([("a", 1)], type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
    return ds.key_by(lambda e: e[0], key_type=Types.STRING())


def operator_of(stream: Any) -> Any:
    return stream._plan.function


def harness(stream: Any, backend: str = "heap") -> KeyedProcessFunctionHarness:
    return KeyedProcessFunctionHarness(operator_of(stream), key=lambda e: e[0], backend=backend)


class Describe(ProcessWindowFunction):
    def process(self, key: str, context: ProcessWindowFunction.Context, elements: Any) -> Any:
        window = context.window()
        yield key, window, window.max_timestamp(), [e[1] for e in elements]


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_pyflink_process_window_function_sees_pyflink_windows(
    backend: str,
) -> None:
    stream = keyed().window(TumblingEventTimeWindows.of(Time.seconds(1))).process(Describe())
    with harness(stream, backend) as h:
        h.process_elements([("a", 1), ("a", 2), ("b", 3)], [100, 1500, 200])
        assert sorted(h.end_input(), key=lambda r: (r[0], r[2])) == [
            ("a", TimeWindow(0, 1000), 999, [1]),
            ("a", TimeWindow(1000, 2000), 1999, [2]),
            ("b", TimeWindow(0, 1000), 999, [3]),
        ]


def test_window_operator_pyflink_apply_and_reduce_with_window_function() -> None:
    class Count(WindowFunction):
        def apply(self, key: str, window: TimeWindow, inputs: Any) -> Any:
            yield key, window.start, len(list(inputs))

    applied = keyed().window(TumblingEventTimeWindows.of(Time.seconds(1))).apply(Count())
    with harness(applied) as h:
        h.process_elements([("a", 1), ("a", 2)], [1, 2])
        assert h.end_input() == [("a", 0, 2)]

    reduced = (
        keyed()
        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]), window_function=Count())
    )
    with harness(reduced) as h:
        h.process_elements([("a", 1), ("a", 2)], [1, 2])
        assert h.end_input() == [("a", 0, 1)]  # the function gets the one reduced value


class FireOnBigValue(Trigger):
    """Fires (and purges) on an element over 10, else at the window's end; counts per window."""

    SEEN = ValueStateDescriptor("seen", Types.LONG())

    def on_element(self, element: Any, timestamp: int, window: TimeWindow, ctx: Any) -> Any:
        seen = ctx.get_partitioned_state(self.SEEN)
        seen.update((seen.value() or 0) + 1)
        if element[1] > 10:
            return TriggerResult.FIRE_AND_PURGE
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Any) -> Any:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Any) -> Any:
        assert ctx.get_current_watermark() >= time
        return TriggerResult.FIRE

    def clear(self, window: TimeWindow, ctx: Any) -> None:
        ctx.get_partitioned_state(self.SEEN).clear()
        ctx.delete_event_time_timer(window.max_timestamp())


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_pyflink_custom_trigger_with_state(backend: str) -> None:
    stream = (
        keyed()
        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
        .trigger(FireOnBigValue())
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    with harness(stream, backend) as h:
        assert h.process_elements([("a", 1), ("a", 20), ("a", 2)], [1, 2, 3]) == [("a", 21)]
        assert h.state("seen", "a", namespace="TimeWindow(0, 1000)") == 3
        assert h.end_input() == [("a", 2)]
        assert h.keys("seen", "TimeWindow(0, 1000)") == []


def test_window_operator_pyflink_count_window_with_slide() -> None:
    """count_window(3, 1): every element fires the last 3 of its key (a count evictor)."""
    stream = keyed().count_window(3, 1).reduce(lambda a, b: (a[0], a[1] + b[1]))
    with harness(stream) as h:
        assert h.process_elements([("a", v) for v in [1, 2, 3, 4]]) == [
            ("a", 1),
            ("a", 3),
            ("a", 6),
            ("a", 9),
        ]


def test_window_operator_pyflink_triggers_evictors_and_lateness() -> None:
    stream = (
        keyed()
        .window(GlobalWindows.create())
        .trigger(PurgingTrigger.of(CountTrigger.of(2)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    with harness(stream) as h:
        assert h.process_elements([("a", 1), ("a", 2), ("a", 3)]) == [("a", 3)]

    lateness = (
        keyed()
        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
        .trigger(EventTimeTrigger.create())
        .evictor(TimeEvictor.of(Time.milliseconds(100)))
        .allowed_lateness(1000)
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    with harness(lateness) as h:
        h.process_elements([("a", 1), ("a", 2)], [100, 500])
        assert h.advance_watermark(999) == [("a", 2)]  # the evictor kept the last 100 ms
        assert h.process_element(("a", 5), timestamp=450) == [("a", 7)]  # late, allowed


def test_window_operator_pyflink_processing_time_assigners() -> None:
    tumbling = keyed().window(TumblingProcessingTimeWindows.of(Time.seconds(1))).process(Describe())
    with harness(tumbling) as h:
        h.process_element(("a", 1))
        assert h.set_processing_time(999) == [("a", TimeWindow(0, 1000), 999, [1])]
    sliding = (
        keyed()
        .window(SlidingProcessingTimeWindows.of(Time.seconds(2), Time.seconds(1)))
        .process(Describe())
    )
    with harness(sliding) as h:
        h.process_element(("a", 1))
        assert len(h.set_processing_time(2000)) == 2
    session = (
        keyed().window(ProcessingTimeSessionWindows.with_gap(Time.seconds(1))).process(Describe())
    )
    with harness(session) as h:
        h.process_element(("a", 1))
        h.set_processing_time(500)
        h.process_element(("a", 2))
        assert h.set_processing_time(1500) == [("a", TimeWindow(0, 1500), 1499, [1, 2])]


def test_window_operator_pyflink_what_is_not_there_names_what_to_use() -> None:
    windowed = keyed().window(TumblingEventTimeWindows.of(Time.seconds(1)))
    with pytest.raises(PyFlinkUnsupportedError, match="give a Trigger"):
        windowed.trigger("count")
    with pytest.raises(PyFlinkUnsupportedError, match="CountEvictor"):
        windowed.evictor(None)
    with pytest.raises(PyFlinkUnsupportedError, match="ProcessWindowFunction"):
        windowed.process(lambda *a: a)
    with pytest.raises(PyFlinkUnsupportedError, match="give a window assigner"):
        keyed().window("tumbling")
    assert windowed.side_output_late_data(OutputTag("late")) is not windowed
