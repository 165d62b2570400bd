"""PyFlink's ``window_all`` (windows of a stream without a key), session windows with a dynamic
gap (``with_dynamic_gap``) and rich reduce/aggregate functions in a window (``open``/``close``
with the runtime context): the operators the plans hold in the harness (no Spark), and the job
files ``window_all_tumbling``, ``session_dynamic_gap`` and ``rich_window_aggregate`` on Spark.

Expected outputs, from Flink's semantics: an event-time window ``[start, end)`` fires once the
watermark reaches ``end - 1``; with monotonous timestamps the watermark is the largest
timestamp seen minus 1 ms, and the end of a bounded input fires every open window.

- ``window_all_tumbling``: ``(name, value, t)`` at t = 1, 2, 4 | 6, 8 | 12 in windows of 5 ms:
  ``[0, 5)`` holds a b c (1 + 2 + 3), ``[5, 10)`` a b (4 + 5), ``[10, 15)`` c (6). Flink runs
  a non-keyed window at parallelism 1, in arrival order.
- ``session_dynamic_gap``: each element opens ``[t, t + gap)``; overlapping windows of a user
  merge. ann: [1, 4) and [3, 8) merge to [1, 8) (2 elements), [10, 12) and [11, 21) to [10, 21)
  (2), [40, 41) alone; bob: [2, 22), [30, 31). STREAMING fires [1, 8) at ann's element 10
  (watermark 9), [10, 21) then [2, 22) at bob's 30 (watermark 29, timers in time order), [30,
  31) at ann's 40, and [40, 41) at the end; BATCH fires each key's windows at the end of the key
  (compared per key).
- ``rich_window_aggregate``: the scale is 10; windows of 5 ms: [0, 5) averages 20 and 40 (30),
  [5, 10) 50, 80 and 20 (50); the window function's ``open`` reads the subtask (0). In the
  harness a rich aggregate function (``open`` sets the scale to the parallelism, 1, times 10)
  is opened and closed too: statecore opens every function (PyFlink opens only the window
  function; on PyFlink 2.3.0 the job prints the same lines, benchmarks/PYFLINK_PARITY.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from statecore.config import StatecoreConfig
from statecore.errors import ConfigError, PyFlinkUnsupportedError
from statecore.pyflink.common import Time, Types
from statecore.pyflink.datastream import (
    AllWindowFunction,
    ReduceFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from statecore.pyflink.datastream.state import ValueStateDescriptor
from statecore.pyflink.datastream.window import (
    EventTimeSessionWindows,
    ProcessingTimeSessionWindows,
    TumblingEventTimeWindows,
)
from statecore.runtime import KeyedProcessFunction
from statecore.runtime.windows import DynamicSessionWindows
from statecore.testing import KeyedProcessFunctionHarness
from tests.pyflink.jobs import rich_window_aggregate, session_dynamic_gap, window_all_tumbling
from tests.pyflink.test_pyflink_jobs import run_with_watermarks

BACKENDS = ["heap", "rocksdb"]
BATCH = RuntimeExecutionMode.BATCH
STREAMING = RuntimeExecutionMode.STREAMING

WINDOW_ALL = ["[0, 5): a b c = 6", "[5, 10): a b = 9", "[10, 15): c = 6"]
ELEMENTS_ALL = [("a", 1, 1), ("b", 2, 2), ("c", 3, 4), ("a", 4, 6), ("b", 5, 8), ("c", 6, 12)]
SESSIONS = [
    "(ann,1,8,2)",
    "(ann,10,21,2)",
    "(bob,2,22,1)",
    "(bob,30,31,1)",
    "(ann,40,41,1)",
]
SESSION_ELEMENTS = [
    ("ann", 1, 3),
    ("bob", 2, 20),
    ("ann", 3, 5),
    ("ann", 10, 2),
    ("ann", 11, 10),
    ("bob", 30, 1),
    ("ann", 40, 1),
]
RICH = ["(hi,0,30,0)", "(hi,5,50,0)"]
RICH_ELEMENTS = [("hi", 1, 2), ("hi", 2, 4), ("hi", 6, 5), ("hi", 7, 8), ("hi", 8, 2)]


def _stream(elements: list[tuple[Any, ...]]) -> Any:
    env = StreamExecutionEnvironment.get_execution_environment()
    info = Types.TUPLE([Types.STRING(), Types.INT(), Types.INT()])
    return env.from_collection(elements, type_info=info)


def _run(function: Any, key: Any, elements: list[Any], time: int, backend: str) -> list[Any]:
    key_type = type(key(elements[0]))
    with KeyedProcessFunctionHarness(
        function, key=key, key_type=key_type, backend=backend
    ) as harness:
        run_with_watermarks(harness, [(e, e[time]) for e in elements], out_of_orderness=0)
        return list(harness.output)


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_pyflink_window_all_runs_one_key_at_parallelism_one(backend: str) -> None:
    stream = (
        _stream(ELEMENTS_ALL)
        .window_all(TumblingEventTimeWindows.of(Time.milliseconds(5)))
        .process(window_all_tumbling.SumAllWindowFunction(), Types.STRING())
    )
    plan = stream._plan
    assert plan.parallelism == 1 and plan.key_type == Types.INT()
    assert {plan.key_selector(e) for e in ELEMENTS_ALL} == {0}
    assert _run(plan.function, plan.key_selector, ELEMENTS_ALL, 2, backend) == WINDOW_ALL


class Concat(ReduceFunction):
    def reduce(self, a: Any, b: Any) -> Any:
        return a[0] + b[0], a[1] + b[1], max(a[2], b[2])


class Bounds(AllWindowFunction):
    def apply(self, window: Any, inputs: Any) -> Any:
        for value in inputs:
            yield window.start, window.end, value


def test_window_operator_pyflink_window_all_reduce_apply_and_count() -> None:
    windowed = _stream(ELEMENTS_ALL).window_all(TumblingEventTimeWindows.of(Time.milliseconds(5)))
    reduced = windowed.reduce(Concat(), Bounds())._plan
    assert _run(reduced.function, reduced.key_selector, ELEMENTS_ALL, 2, "heap") == [
        (0, 5, ("abc", 6, 4)),
        (5, 10, ("ab", 9, 8)),
        (10, 15, ("c", 6, 12)),
    ]
    applied = windowed.apply(Bounds())._plan
    assert len(_run(applied.function, applied.key_selector, ELEMENTS_ALL, 2, "heap")) == 6
    counted = _stream(ELEMENTS_ALL).count_window_all(4).reduce(Concat())._plan
    assert counted.parallelism == 1
    assert _run(counted.function, counted.key_selector, ELEMENTS_ALL, 2, "heap") == [
        ("abca", 10, 6)
    ]
    with pytest.raises(PyFlinkUnsupportedError, match="ProcessAllWindowFunction"):
        windowed.process(Bounds())
    with pytest.raises(PyFlinkUnsupportedError, match="window_all after a keyed function"):
        _stream(ELEMENTS_ALL).key_by(lambda e: e[0]).reduce(Concat()).window_all(None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_operator_pyflink_dynamic_gap_sessions_merge(backend: str) -> None:
    stream = (
        _stream(SESSION_ELEMENTS)
        .key_by(lambda e: e[0], key_type=Types.STRING())
        .window(EventTimeSessionWindows.with_dynamic_gap(session_dynamic_gap.GapOfTheElement()))
        .process(session_dynamic_gap.SessionBounds())
    )
    out = _run(stream._plan.function, lambda e: e[0], SESSION_ELEMENTS, 1, backend)
    assert [f"({k},{s},{e},{n})" for k, s, e, n in out] == SESSIONS


def test_window_operator_pyflink_dynamic_gap_must_be_positive() -> None:
    sessions = EventTimeSessionWindows.with_dynamic_gap(lambda e: e[2])
    assert isinstance(sessions, DynamicSessionWindows) and sessions.is_event_time
    processing = ProcessingTimeSessionWindows.with_dynamic_gap(
        session_dynamic_gap.GapOfTheElement()
    )
    assert not processing.is_event_time
    assert processing.assign_element_windows(("a", 0, 7), None, now=100)[0].end == 107
    with pytest.raises(ConfigError, match=r"0 ms for element \('a', 5, 0\)"):
        sessions.assign_element_windows(("a", 5, 0), 5, now=0)
    with pytest.raises(ConfigError, match="timedelta or milliseconds"):
        sessions.assign_element_windows(("a", 5, "soon"), 5, now=0)
    with pytest.raises(PyFlinkUnsupportedError, match="SessionWindowTimeGapExtractor"):
        EventTimeSessionWindows.with_dynamic_gap(3)


class Opened(ReduceFunction):
    """A rich reduce function: ``open`` declares keyed state (PyFlink's runtime context),
    ``close`` lets it go."""

    def __init__(self) -> None:
        self.calls = None

    def open(self, runtime_context: Any) -> None:
        self.calls = runtime_context.get_state(ValueStateDescriptor("calls", Types.INT()))
        self.task = runtime_context.get_task_name()

    def reduce(self, a: Any, b: Any) -> Any:
        self.calls.update((self.calls.value() or 0) + 1)
        return a[0], a[1] + b[1], self.calls.value()

    def close(self) -> None:
        self.calls = None


class RichScaledAverage(rich_window_aggregate.ScaledAverage):
    """The job's aggregate function, rich: its scale from the runtime context."""

    def __init__(self) -> None:
        super().__init__(scale=None)

    def open(self, runtime_context: Any) -> None:
        self.scale = runtime_context.get_number_of_parallel_subtasks() * 10

    def close(self) -> None:
        self.scale = None


@pytest.mark.parametrize("backend", BACKENDS)
def test_rich_function_window_reduce_and_aggregate_opened_and_closed(backend: str) -> None:
    keyed = _stream(RICH_ELEMENTS).key_by(lambda e: e[0], key_type=Types.STRING())
    windowed = keyed.window(TumblingEventTimeWindows.of(Time.milliseconds(5)))
    aggregate = RichScaledAverage()
    label = rich_window_aggregate.LabelWindow()
    plan = windowed.aggregate(aggregate, label)._plan
    out = _run(plan.function, lambda e: e[0], RICH_ELEMENTS, 1, backend)
    assert [f"({k},{s},{a},{t})" for k, s, a, t in out] == RICH
    assert aggregate.scale is None  # closed
    reduce = Opened()
    plan = windowed.reduce(reduce)._plan
    out = _run(plan.function, lambda e: e[0], RICH_ELEMENTS, 1, backend)
    assert out == [("hi", 3, 1), ("hi", 21, 3)]  # the timestamps summed, the calls counted
    assert reduce.calls is None and reduce.task == "main"


@pytest.mark.spark
@pytest.mark.parametrize(
    ("job", "mode", "expected"),
    [
        (window_all_tumbling.window_all_tumbling, STREAMING, WINDOW_ALL),
        (session_dynamic_gap.session_dynamic_gap, STREAMING, SESSIONS),
        (session_dynamic_gap.session_dynamic_gap, BATCH, SESSIONS),
        (rich_window_aggregate.rich_window_aggregate, STREAMING, RICH),
    ],
    ids=["window_all", "dynamic_gap", "dynamic_gap_batch", "rich_aggregate"],
)
def test_window_operator_pyflink_new_jobs_print_flinks_output(
    spark: Any,
    statecore_home: StatecoreConfig,
    capsys: pytest.CaptureFixture[str],
    job: Any,
    mode: Any,
    expected: list[str],
) -> None:
    job(mode)
    lines = capsys.readouterr().out.splitlines()
    if mode == BATCH:  # each key's windows at the end of the key: compared per key
        key = lambda line: line.split(",")[0]  # noqa: E731
        assert sorted(lines, key=key) == sorted(expected, key=key)
    else:
        assert lines == expected


class Nothing(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        return None


@pytest.mark.spark
def test_window_operator_pyflink_processing_time_windows_fire_at_the_end_of_a_batch(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """In BATCH Flink fires every processing-time timer at the end of input (each key's after
    its event-time ones; BatchExecutionInternalTimeService): an hour's processing-time session
    holds each key's elements and fires at the end, with the key's sum. keyed_process refuses
    the option on a run that does not end its input."""
    from pyspark.sql import types as T

    from statecore.spark import keyed_process

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(BATCH)
    env.set_parallelism(1)
    info = Types.TUPLE([Types.STRING(), Types.INT()])
    ds = env.from_collection([("a", 1), ("b", 10), ("a", 2)], type_info=info)
    ds.key_by(lambda e: e[0], key_type=Types.STRING()).window(
        ProcessingTimeSessionWindows.with_gap(Time.hours(1))
    ).reduce(lambda x, y: (x[0], x[1] + y[1])).print()
    env.execute("processing_time_batch")
    assert sorted(capsys.readouterr().out.splitlines()) == ["(a,3)", "(b,10)"]
    df = spark.createDataFrame([("a", 1)], "k string, v long")
    with pytest.raises(ConfigError, match="give end_of_input=True with it"):
        keyed_process(
            df,
            key="k",
            function=Nothing(),
            output_schema=T.StructType([T.StructField("k", T.StringType())]),
            job="processing_timers_without_end",
            checkpoint_id=1,
            processing_timers_at_end=True,
        )
