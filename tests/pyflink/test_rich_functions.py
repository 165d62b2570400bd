"""Rich functions of ported jobs without Spark: ``open``/``close`` of every user function
(the stage before ``key_by`` through :class:`Prepare`, the keyed stage through
:class:`PipelineFunction` in statecore's harness on both backends), the non-keyed
``ProcessFunction``, and the keyed operator's own settings (``uid``, ``set_parallelism``,
``set_max_parallelism``) as the plan gives them to Spark.

How the expectations follow from Flink: a function of a ``KeyedStream`` (``key_by(...).flat_map``,
``reduce``) runs in a keyed operator and its runtime context gives keyed state; every other
function's ``getState`` fails (Flink: "Keyed state can only be used on a 'keyed stream'"); a
``ProcessFunction`` on a non-keyed stream cannot set timers ("Setting timers is only supported
on a keyed streams"); ``open`` comes before the first element and ``close`` after the last.
"""

from __future__ import annotations

import pickle
from types import SimpleNamespace
from typing import Any

import pytest

from statecore.errors import ConfigError, PyFlinkUnsupportedError, StateAccessError
from statecore.pyflink.common import Types
from statecore.pyflink.datastream import (
    FilterFunction,
    FlatMapFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
)
from statecore.pyflink.datastream.execution import dataflow
from statecore.pyflink.datastream.operators import (
    PipelineFunction,
    Prepare,
    Process,
    Reduce,
    Step,
)
from statecore.pyflink.datastream.state import ValueStateDescriptor
from statecore.testing import KeyedProcessFunctionHarness
from tests.pyflink.jobs.count_window_average import CountWindowAverage

BACKENDS = ["heap", "rocksdb"]


class Recording:
    """What a rich function saw: its ``open`` calls (with the subtask) and ``close`` calls."""

    def __init__(self) -> None:
        self.opened: list[Any] = []
        self.closed = 0

    def open(self, runtime_context: RuntimeContext) -> None:
        self.opened.append(
            (
                runtime_context.get_index_of_this_subtask(),
                runtime_context.get_number_of_parallel_subtasks(),
            )
        )

    def close(self) -> None:
        self.closed += 1


class Upper(Recording, MapFunction):
    def map(self, value: Any) -> Any:
        assert self.opened, "map before open"
        return value.upper()


class Words(Recording, FlatMapFunction):
    def flat_map(self, value: Any) -> Any:
        yield from value.split()


class Long(Recording, FilterFunction):
    def filter(self, value: Any) -> bool:
        return len(value) > 1


class First(Recording, KeySelector):
    def get_key(self, value: Any) -> Any:
        return value[0]


def _pickled(elements: list[Any]) -> list[SimpleNamespace]:
    """Elements as the keyed stage gets them (a row whose ``value`` is the pickled element)."""
    return [SimpleNamespace(value=pickle.dumps(e)) for e in elements]


def _keyed(function: Any, steps: tuple[Step, ...] = (), *, output_type: Any = None) -> Any:
    return PipelineFunction(
        function,
        steps,
        function_type=None,
        output_type=output_type,
        output="text",
        pickled_key=False,
    )


def test_rich_function_open_and_close_on_every_function_before_key_by() -> None:
    words, upper, long, first = Words(), Upper(), Long(), First()
    prepare = Prepare(
        steps=(Step("flat_map", words, None), Step("map", upper, None), Step("filter", long, None)),
        key_selector=first,
        key_encoding="string",
        decode="text",
    )
    rows = list(prepare([("to be a b", None)], 3, 4))
    assert [(key, pickle.loads(value)) for key, value, _, _ in rows] == [("T", "TO"), ("B", "BE")]
    for function in (words, upper, long, first):
        assert function.opened == [(3, 4)] and function.closed == 1


def test_rich_function_closed_when_the_stage_fails() -> None:
    class Failing(Recording, MapFunction):
        def map(self, value: Any) -> Any:
            raise ValueError(value)

    failing, first = Failing(), First()
    prepare = Prepare(
        steps=(Step("map", failing, None),),
        key_selector=first,
        key_encoding="string",
        decode="text",
    )
    with pytest.raises(ValueError, match="x"):
        list(prepare([("x", None)], 0, 1))
    assert failing.closed == 1 and first.closed == 1


def test_rich_function_before_key_by_has_no_keyed_state() -> None:
    class Stateful(MapFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            runtime_context.get_state(ValueStateDescriptor("seen", Types.LONG()))

        def map(self, value: Any) -> Any:
            return value

    prepare = Prepare(
        steps=(Step("map", Stateful(), None),),
        key_selector=None,
        key_encoding="sequence",
        decode="text",
        operator="file_source",
    )
    with pytest.raises(StateAccessError, match="file_source: keyed state is only available"):
        list(prepare([("x", None)], 0, 1))


def test_rich_function_stream_source_task_count_is_a_clear_error() -> None:
    """In a stream the stage before key_by runs in as many tasks as Spark makes per
    micro-batch: asking for their number says so, the subtask index is known."""
    upper = Upper()
    prepare = Prepare(
        steps=(Step("map", upper, None),), key_selector=None, key_encoding="sequence", decode="text"
    )
    with pytest.raises(PyFlinkUnsupportedError, match="per micro-batch"):
        list(prepare([("x", None)], 0, None))


@pytest.mark.parametrize("backend", BACKENDS)
def test_rich_function_count_window_average_keyed_flat_map_with_value_state(backend: str) -> None:
    """PyFlink's "Working with State" example in the keyed stage: its ``open`` declares the
    state; (1, 3), (1, 5) average 4, (1, 7), (1, 4) average 5 (int(11 / 2)), (1, 2) waits for a
    second element; key 2's own state averages (10, 20) to 15."""
    function = _keyed(None, (Step("flat_map", CountWindowAverage(), None),))
    elements = [(1, 3), (1, 5), (2, 10), (1, 7), (2, 20), (1, 4), (1, 2)]
    with KeyedProcessFunctionHarness(
        function, key=lambda row: pickle.loads(row.value)[0], key_type=int, backend=backend
    ) as harness:
        out = harness.process_elements(_pickled(elements))
        assert [text for _, text in out] == ["(1, 4)", "(2, 15)", "(1, 5)"]
        assert harness.state("average", 1) == (1, 2)
        assert harness.state("average", 2) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_rich_function_reduce_function_opened_with_keyed_state(backend: str) -> None:
    """A ``ReduceFunction`` of a keyed stream is opened with the key's runtime context (its own
    state beside the reduction's); ``close`` at the end."""

    class CountingSum(ReduceFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.calls = runtime_context.get_state(ValueStateDescriptor("calls", Types.LONG()))
            self.closed = False

        def reduce(self, value1: Any, value2: Any) -> Any:
            self.calls.update((self.calls.value() or 0) + 1)
            return value1[0], value1[1] + value2[1]

        def close(self) -> None:
            self.closed = True

    reduce = CountingSum()
    function = _keyed(Reduce(reduce, emit_each=True))
    with KeyedProcessFunctionHarness(
        function, key=lambda row: pickle.loads(row.value)[0], backend=backend
    ) as harness:
        out = harness.process_elements(_pickled([("a", 1), ("b", 2), ("a", 3), ("a", 4)]))
        assert [text for _, text in out] == ["('a', 1)", "('b', 2)", "('a', 4)", "('a', 8)"]
        assert harness.state("calls", "a") == 2 and harness.state("calls", "b") is None
    assert reduce.closed


def test_rich_function_after_the_keyed_function_is_not_keyed() -> None:
    """``key_by(...).flat_map(f).map(g)``: ``f`` is keyed, ``g`` runs on the stream ``f`` outputs
    (no key): its ``get_state`` fails, as in Flink."""

    class StatefulMap(MapFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            runtime_context.get_state(ValueStateDescriptor("n", Types.LONG()))

        def map(self, value: Any) -> Any:
            return value

    steps = (Step("flat_map", CountWindowAverage(), None), Step("map", StatefulMap(), None))
    with pytest.raises(StateAccessError, match="keyed state is only available on a keyed"):
        KeyedProcessFunctionHarness(_keyed(None, steps), key=lambda row: 0).__enter__()


def test_rich_function_steps_opened_once_closed_once_in_the_keyed_stage() -> None:
    upper, long = Upper(), Long()
    function = _keyed(None, (Step("map", upper, None), Step("filter", long, None)))
    with KeyedProcessFunctionHarness(function, key=lambda row: 0) as harness:
        out = harness.process_elements(_pickled(["ab", "c", "de"]))
        assert [text for _, text in out] == ["AB", "DE"]
    assert upper.opened == [(0, 1)] and long.opened == [(0, 1)]
    assert upper.closed == 1 and long.closed == 1


class Stamp(ProcessFunction):
    def open(self, runtime_context: RuntimeContext) -> None:
        self.task = runtime_context.get_task_name_with_subtasks()

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Any:
        service = ctx.timer_service()
        yield value, ctx.timestamp(), service.current_watermark(), self.task


@pytest.mark.parametrize("backend", BACKENDS)
def test_rich_function_process_function_sees_timestamp_and_watermark(backend: str) -> None:
    with KeyedProcessFunctionHarness(
        Process(Stamp()), key=lambda e: e[0], backend=backend, operator="stamp"
    ) as harness:
        assert harness.process_element(("a", 1), timestamp=1000) == [
            (("a", 1), 1000, harness.watermark, "stamp (1/1)")
        ]
        harness.advance_watermark(1500)
        assert harness.process_element(("b", 2), timestamp=2000) == [
            (("b", 2), 2000, 1500, "stamp (1/1)")
        ]


def test_rich_function_process_function_timers_are_keyed_only() -> None:
    class Timing(ProcessFunction):
        def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Any:
            ctx.timer_service().register_event_time_timer(10)
            yield value

    with KeyedProcessFunctionHarness(Process(Timing()), key=lambda e: e) as harness:
        with pytest.raises(PyFlinkUnsupportedError, match="only supported on keyed streams"):
            harness.process_element("a", timestamp=1)
        assert harness.timers() == []


def test_rich_function_process_function_has_no_key_and_no_keyed_state() -> None:
    class Keyed(ProcessFunction):
        def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Any:
            yield ctx.get_current_key()

    with KeyedProcessFunctionHarness(Process(Keyed()), key=lambda e: e) as harness:
        with pytest.raises(PyFlinkUnsupportedError, match="has no key"):
            harness.process_element("a")

    class Stateful(ProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            runtime_context.get_list_state(None)  # type: ignore[arg-type]

        def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Any:
            yield value

    with pytest.raises(StateAccessError, match="get_list_state"):
        KeyedProcessFunctionHarness(Process(Stateful()), key=lambda e: e).__enter__()


def _env() -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    return env


def _plan(env: StreamExecutionEnvironment) -> Any:
    return env._plan()


def test_rich_function_uid_names_the_keyed_operator() -> None:
    """``uid`` on the keyed operator is the operator its state is checkpointed under (and a
    restore matches); on a stateless operator after it, it changes nothing."""
    env = _env()
    keyed = env.from_collection([(1, 3)]).key_by(lambda r: r[0]).flat_map(CountWindowAverage())
    keyed.uid("average").map(str).uid("format").print()
    assert dataflow(env, _plan(env), "job").operator == "average"
    env = _env()
    env.from_collection([(1, 3)]).key_by(lambda r: r[0]).flat_map(CountWindowAverage()).print()
    assert dataflow(env, _plan(env), "job").operator == "main"
    with pytest.raises(ConfigError, match="operator name 'my uid'"):
        keyed.uid("my uid")


def test_rich_function_operator_parallelism_and_max_parallelism_of_the_keyed_stage() -> None:
    env = _env()
    env.set_max_parallelism(64)
    keyed = env.from_collection([(1, 3)]).key_by(lambda r: r[0]).flat_map(CountWindowAverage())
    keyed.set_parallelism(3).set_max_parallelism(16).map(str).set_parallelism(3).print()
    flow = dataflow(env, _plan(env), "job")
    assert (flow.parallelism, flow.max_parallelism) == (3, 16)
    assert flow.prepare.max_parallelism == 16  # type: ignore[attr-defined]
    env = _env()
    env.set_max_parallelism(64)
    env.from_collection([(1, 3)]).key_by(lambda r: r[0]).reduce(lambda a, b: a).print()
    assert (dataflow(env, _plan(env), "job").parallelism, env.get_max_parallelism()) == (2, 64)


def test_rich_function_parallelism_spark_cannot_honour_is_a_clear_error() -> None:
    env = _env()
    source = env.from_collection(["a"])
    with pytest.raises(PyFlinkUnsupportedError, match="before key_by"):
        source.map(str).set_parallelism(4)
    source.key_by(lambda w: w).reduce(lambda a, b: a).map(str).set_parallelism(4).print()
    with pytest.raises(PyFlinkUnsupportedError, match=r"set_parallelism\(4\) on an operator after"):
        dataflow(env, _plan(env), "job")
    with pytest.raises(PyFlinkUnsupportedError, match="at most 32768"):
        source.key_by(lambda w: w).reduce(lambda a, b: a).set_max_parallelism(40_000)
    with pytest.raises(PyFlinkUnsupportedError, match="positive int"):
        source.key_by(lambda w: w).reduce(lambda a, b: a).set_parallelism(0)


def test_rich_function_process_needs_a_process_function() -> None:
    source = _env().from_collection(["a"])
    with pytest.raises(PyFlinkUnsupportedError, match=r"DataStream.process\(Upper\)"):
        source.process(Upper())
    processed = source.process(Stamp())
    with pytest.raises(PyFlinkUnsupportedError, match="key_by after a keyed function"):
        processed.key_by(lambda e: e)


def test_rich_function_uid_that_matches_no_checkpointed_state_is_a_clear_error(
    tmp_path: Any,
) -> None:
    """A job's state checkpointed under uid ``average`` is not silently dropped by a run whose
    keyed operator has another uid (Flink refuses such a restore); the same uid, or a new job,
    runs."""
    from statecore.catalog import Catalog, StateRecord
    from statecore.spark.dataflow import check_operator

    with Catalog.connect(f"sqlite:///{tmp_path / 'catalog.db'}") as catalog:
        check_operator(catalog, "avg_job", "renamed")  # a new job: nothing to match
        catalog.ensure_job("avg_job", parallelism=1, max_parallelism=128)
        state = StateRecord(
            job="avg_job", operator="average", name="average", kind="value",
            descriptor={}, schema="{}",
        )  # fmt: skip
        catalog.register_states("avg_job", "average", [state])
        check_operator(catalog, "avg_job", "average")
        with pytest.raises(ConfigError, match="belongs to operator 'average'.*is 'renamed'"):
            check_operator(catalog, "avg_job", "renamed")
