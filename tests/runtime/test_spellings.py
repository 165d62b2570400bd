"""PyFlink spellings on statecore's Pythonic API fail with errors that name statecore's
spelling, in a job's task (the harness runs it) and without a cost per record."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

import statecore
import statecore.runtime
from statecore import (
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    ListStateDescriptor,
    OnTimerContext,
    RuntimeContext,
    StateTtlConfig,
    ValueStateDescriptor,
)
from statecore.errors import PyFlinkSpellingError, StateError
from statecore.testing import KeyedProcessFunctionHarness

Event = namedtuple("Event", "user amount")


def run(function: KeyedProcessFunction, timestamp: int | None = 5) -> list[Any]:
    with KeyedProcessFunctionHarness(function, key="user") as harness:
        harness.process_element(Event("a", 1), timestamp=timestamp)
        harness.advance_watermark(1_000)
        return harness.output


class Calls(KeyedProcessFunction):
    """Calls ``spelling(ctx)`` in ``process_element``."""

    def __init__(self, spelling: Any) -> None:
        self.spelling = spelling

    def process_element(self, value: Any, ctx: Context) -> Iterator[Any]:
        yield self.spelling(ctx)


def test_pyflink_get_current_key_names_current_key() -> None:
    with pytest.raises(PyFlinkSpellingError, match=r"statecore spells it ctx\.current_key"):
        run(Calls(lambda ctx: ctx.get_current_key()))


def test_pyflink_timestamp_call_names_the_attribute_with_its_value() -> None:
    class Stamp(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Context) -> Iterator[Any]:
            yield ctx.timestamp()  # type: ignore[misc]

    with pytest.raises(
        PyFlinkSpellingError, match=r"spells it ctx\.timestamp \(an attribute, here 5\)"
    ) as caught:
        run(Stamp())
    assert isinstance(caught.value.__cause__, TypeError)
    assert "'int' object is not callable" in str(caught.value.__cause__)
    with pytest.raises(PyFlinkSpellingError, match=r"here None"):  # no event time
        run(Stamp(), timestamp=None)


def test_pyflink_current_key_call_and_on_timer_timestamp_call_teach_too() -> None:
    class KeyCall(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Context) -> Iterator[Any]:
            yield ctx.current_key()

    with pytest.raises(PyFlinkSpellingError, match=r"ctx\.current_key \(an attribute, here 'a'\)"):
        run(KeyCall())

    class TimerStamp(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Context) -> None:
            ctx.timer_service.register_event_time_timer(10)

        def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[Any]:
            yield ctx.timestamp()  # type: ignore[misc]

    with pytest.raises(PyFlinkSpellingError, match=r"ctx\.timestamp \(an attribute, here 10\)"):
        run(TimerStamp())


def test_pyflink_timer_service_call_names_the_property() -> None:
    with pytest.raises(
        PyFlinkSpellingError, match=r"ctx\.timer_service\.register_event_time_timer"
    ):
        run(Calls(lambda ctx: ctx.timer_service().register_event_time_timer(10)))


def test_pyflink_time_domain_call_names_the_attribute() -> None:
    class Domain(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Context) -> None:
            ctx.timer_service.register_event_time_timer(10)

        def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[Any]:
            yield ctx.time_domain()

    with pytest.raises(PyFlinkSpellingError, match=r"spells it ctx\.time_domain \(an attribute"):
        run(Domain())


def test_pyflink_runtime_context_getters_name_attributes_in_open() -> None:
    class Subtask(KeyedProcessFunction):
        def __init__(self, getter: str) -> None:
            self.getter = getter

        def open(self, ctx: RuntimeContext) -> None:
            getattr(ctx, self.getter)()

        def process_element(self, value: Any, ctx: Context) -> None:
            pass

    expected = {
        "get_index_of_this_subtask": "runtime_context.subtask_index",
        "get_number_of_parallel_subtasks": "runtime_context.parallelism",
        "get_max_number_of_parallel_subtasks": "runtime_context.max_parallelism",
        "get_task_name": "runtime_context.operator",
    }
    for getter, spelling in expected.items():
        with pytest.raises(PyFlinkSpellingError, match=f"RuntimeContext.{getter} .*{spelling}"):
            run(Subtask(getter))

    class Called(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            runtime_context.subtask_index()  # type: ignore[operator]

        def process_element(self, value: Any, ctx: Context) -> None:
            pass

    with pytest.raises(
        PyFlinkSpellingError, match=r"runtime_context\.subtask_index \(an attribute, here 0\)"
    ):
        run(Called())


def test_pyflink_is_restored_call_in_initialize_state_teaches() -> None:
    class Restored(KeyedProcessFunction, CheckpointedFunction):
        def initialize_state(self, context: FunctionInitializationContext) -> None:
            if context.is_restored():  # type: ignore[operator]
                pass

        def snapshot_state(self, context: FunctionSnapshotContext) -> None:
            pass

        def process_element(self, value: Any, ctx: Context) -> None:
            pass

    with pytest.raises(
        PyFlinkSpellingError, match=r"context\.is_restored \(an attribute, here False\)"
    ):
        run(Restored())


def test_pyflink_enable_time_to_live_names_the_ttl_keyword() -> None:
    descriptor = ValueStateDescriptor("count", int)
    with pytest.raises(PyFlinkSpellingError, match=r"enable_time_to_live .*ttl=StateTtlConfig"):
        descriptor.enable_time_to_live(StateTtlConfig(ttl=timedelta(seconds=1)))
    with pytest.raises(PyFlinkSpellingError, match=r"ListStateDescriptor\.enable_time_to_live"):
        ListStateDescriptor("seen", str).enable_time_to_live(None)
    with pytest.raises(PyFlinkSpellingError, match=r"spells it descriptor\.name"):
        descriptor.get_name()
    assert ValueStateDescriptor("count", int) == descriptor  # the dataclass is unchanged


def test_pyflink_ttl_builder_names_the_keyword_dataclass() -> None:
    with pytest.raises(PyFlinkSpellingError, match=r"StateTtlConfig\(ttl=timedelta\(seconds=n\)"):
        StateTtlConfig.new_builder(1)
    config = StateTtlConfig(ttl=timedelta(seconds=1))
    with pytest.raises(PyFlinkSpellingError, match="no builder"):
        config.new_builder(1)


def test_pyflink_spelling_errors_are_attribute_type_and_state_errors() -> None:
    assert issubclass(PyFlinkSpellingError, AttributeError)
    assert issubclass(PyFlinkSpellingError, TypeError)
    assert issubclass(PyFlinkSpellingError, StateError)
    descriptor = ValueStateDescriptor("count", int)
    assert not hasattr(descriptor, "enable_time_to_live")  # feature detection stays truthful
    assert not hasattr(StateTtlConfig, "new_builder")
    assert getattr(descriptor, "get_name", "absent") == "absent"


def test_pyflink_unrelated_type_errors_pass_unchanged() -> None:
    class Mistake(KeyedProcessFunction):
        def open(self, ctx: RuntimeContext) -> None:
            self.limit = 3

        def process_element(self, value: Any, ctx: Context) -> Iterator[Any]:
            yield self.limit()  # the function's own attribute, not a statecore context's

    with pytest.raises(TypeError, match="'int' object is not callable") as caught:
        run(Mistake())
    assert not isinstance(caught.value, PyFlinkSpellingError)
    with pytest.raises(TypeError, match="can only concatenate") as other:
        run(Calls(lambda ctx: ctx.current_key + 1))
    assert not isinstance(other.value, PyFlinkSpellingError)


def test_pyflink_names_a_function_needs_are_exported_with_its_base_classes() -> None:
    for module in (statecore, statecore.runtime):
        assert module.TimeDomain.EVENT_TIME.value == "event_time"
        assert module.TimerService is statecore.runtime.functions.TimerService
        assert module.MIN_WATERMARK == -(1 << 63)
        for name in ("TimeDomain", "TimerService", "Timer", "MIN_WATERMARK"):
            assert name in module.__all__
    assert "PyFlinkSpellingError" in statecore.__all__


def test_pyflink_spellings_leave_the_hot_path_alone() -> None:
    # a __getattr__ on a slotted context would slow every attribute read of every record
    for cls in (Context, OnTimerContext, RuntimeContext, ValueStateDescriptor, StateTtlConfig):
        assert "__getattr__" not in vars(cls) and not hasattr(cls, "__getattr__"), cls
    assert Context.__slots__ == ("_backend", "timestamp", "current_key")


def test_pyflink_timestamp_call_teaches_in_the_spark_batch_path() -> None:
    class Stamp(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Context) -> Iterator[Any]:
            yield ctx.timestamp()  # type: ignore[misc]

    batch = pa.RecordBatch.from_pydict(
        {"user": ["a"], "ts": pa.array([7], pa.int64()), "kg": pa.array([None], pa.int32())}
    )
    with KeyedProcessFunctionHarness(Stamp(), key="user") as harness:
        task = harness.task  # the harness's task is a job's: run a batch as a Spark task does
        with pytest.raises(PyFlinkSpellingError, match="here 7"):
            task.process_batch(batch, key="user", key_group="kg", event_time="ts")
