"""Each PyFlink name of ``statecore.pyflink`` maps onto statecore's API, and what statecore
cannot honour fails with a ``PyFlinkUnsupportedError`` saying what it offers instead."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

import statecore.pyflink as pyflink
from statecore import descriptors as sc
from statecore.errors import ConfigError, PyFlinkUnsupportedError
from statecore.pyflink import (
    AggregateFunction,
    AggregatingStateDescriptor,
    Duration,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ReduceFunction,
    ReducingStateDescriptor,
    RuntimeContext,
    StateTtlConfig,
    Time,
    TimeDomain,
    Types,
    ValueStateDescriptor,
)
from statecore.pyflink.common import time as pyflink_time
from statecore.pyflink.common import typeinfo
from statecore.pyflink.datastream import functions, state
from statecore.runtime import MIN_WATERMARK
from statecore.runtime import TimeDomain as StatecoreTimeDomain
from statecore.testing import KeyedProcessFunctionHarness
from statecore.ttl import CleanupStrategy, StateVisibility, UpdateType
from statecore.types import PICKLED, TypeInfo


def test_pyflink_names_importable_from_the_package_and_pyflinks_module_paths() -> None:
    for name in pyflink.__all__:
        assert getattr(pyflink, name) is not None
    assert state.StateTtlConfig is StateTtlConfig and functions.RuntimeContext is RuntimeContext
    assert typeinfo.Types is Types and pyflink_time.Time is Time
    assert TimeDomain is StatecoreTimeDomain  # EVENT_TIME and PROCESSING_TIME, as PyFlink's


class Everything(KeyedProcessFunction):
    """Uses every context name PyFlink's KeyedProcessFunction has."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.info = (
            runtime_context.get_task_name(),
            runtime_context.get_index_of_this_subtask(),
            runtime_context.get_number_of_parallel_subtasks(),
            runtime_context.get_max_number_of_parallel_subtasks(),
            runtime_context.get_attempt_number(),
            runtime_context.get_task_name_with_subtasks(),
            runtime_context.get_job_parameter("missing", "fallback"),
        )
        self.events = runtime_context.get_list_state(ListStateDescriptor("events", Types.STRING()))
        self.total = runtime_context.get_reducing_state(
            ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG())
        )

    def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
        self.events.add(value[1])
        self.total.add(1)
        service = ctx.timer_service()
        service.register_event_time_timer(ctx.timestamp() + 10)
        service.register_event_time_timer(ctx.timestamp() + 20)
        service.delete_event_time_timer(ctx.timestamp() + 20)
        now = service.current_processing_time()
        service.register_processing_time_timer(now + 5)
        service.register_processing_time_timer(now + 6)
        service.delete_processing_time_timer(now + 6)
        yield "element", ctx.get_current_key(), ctx.timestamp(), service.current_watermark()

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Any]:
        yield ctx.time_domain(), ctx.get_current_key(), timestamp, ctx.timestamp()


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_pyflink_contexts_map_every_name(backend: str) -> None:
    function = Everything()
    with KeyedProcessFunctionHarness(function, key=lambda e: e[0], backend=backend) as harness:
        assert function.info == ("main", 0, 1, 128, 0, "main (1/1)", "fallback")
        assert harness.process_element(("k", "x"), timestamp=100) == [
            ("element", "k", 100, MIN_WATERMARK)
        ]
        assert harness.advance_watermark(200) == [(TimeDomain.EVENT_TIME, "k", 110, 110)]
        assert harness.set_processing_time(10) == [(TimeDomain.PROCESSING_TIME, "k", 5, 5)]
        assert harness.process_element(("k", "y"), timestamp=300) == [("element", "k", 300, 200)]
        assert harness.state("events", key="k") == ["x", "y"]
        assert harness.state("total", key="k") == 2


def test_pyflink_metrics_group_is_unsupported() -> None:
    class Metrics(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            runtime_context.get_metrics_group()

        def process_element(self, value: Any, ctx: Any) -> None:
            return None

    with pytest.raises(PyFlinkUnsupportedError, match="no metric groups"):
        KeyedProcessFunctionHarness(Metrics(), key=lambda e: e)


def test_pyflink_subclass_of_a_pyflink_function_calls_super() -> None:
    class Base(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
            yield "base", ctx.get_current_key()

    class Derived(Base):
        def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
            yield from super().process_element(value, ctx)
            yield "derived", ctx.timestamp()

    with KeyedProcessFunctionHarness(Derived(), key=lambda e: e) as harness:
        assert harness.process_element("k", timestamp=7) == [("base", "k"), ("derived", 7)]
        assert "_pyflink_context" in vars(harness.function)  # bound once, to the task's
        assert "_pyflink_context" not in harness.function.__getstate__()  # never pickled


class Average(AggregateFunction):
    def create_accumulator(self) -> tuple[int, int]:
        return 0, 0

    def add(self, value: int, accumulator: tuple[int, int]) -> tuple[int, int]:
        return accumulator[0] + value, accumulator[1] + 1

    def get_result(self, accumulator: tuple[int, int]) -> float:
        return accumulator[0] / accumulator[1]

    def merge(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return a[0] + b[0], a[1] + b[1]


class Sum(ReduceFunction):
    def reduce(self, value1: int, value2: int) -> int:
        return value1 + value2


def test_pyflink_descriptors_map_to_statecore_descriptors() -> None:
    value = ValueStateDescriptor("v", Types.LONG()).to_statecore()
    assert value == sc.ValueStateDescriptor("v", pa.int64()) and value.default is None
    listed = ListStateDescriptor("l", Types.PICKLED_BYTE_ARRAY()).to_statecore()
    assert listed == sc.ListStateDescriptor("l", PICKLED)
    mapped = MapStateDescriptor("m", Types.STRING(), Types.DOUBLE()).to_statecore()
    assert mapped == sc.MapStateDescriptor("m", pa.string(), pa.float64())
    reducing = ReducingStateDescriptor("r", Sum(), Types.INT())
    assert reducing.to_statecore().reduce_function(2, 3) == 5
    aggregating = AggregatingStateDescriptor(
        "a", Average(), Types.TUPLE([Types.LONG(), Types.LONG()])
    ).to_statecore()
    assert aggregating.value_info.arrow == pa.struct([("f0", pa.int64()), ("f1", pa.int64())])
    assert ValueStateDescriptor("v", Types.LONG()).get_name() == "v"
    with pytest.raises(TypeError, match="AggregateFunction"):
        AggregatingStateDescriptor("a", Sum(), Types.LONG())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="identifier"):  # statecore's rule for state names
        ValueStateDescriptor("text state", Types.STRING()).to_statecore()


def test_pyflink_aggregating_state_runs() -> None:
    class Averages(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.avg = runtime_context.get_aggregating_state(
                AggregatingStateDescriptor(
                    "avg", Average(), Types.TUPLE([Types.LONG(), Types.LONG()])
                )
            )

        def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
            self.avg.add(value[1])
            yield ctx.get_current_key(), self.avg.get()

    with KeyedProcessFunctionHarness(Averages(), key=lambda e: e[0]) as harness:
        assert harness.process_elements([("k", 1), ("k", 2)]) == [("k", 1.0), ("k", 1.5)]


@pytest.mark.parametrize(
    ("types", "arrow"),
    [
        (Types.STRING(), pa.string()),
        (Types.INT(), pa.int32()),
        (Types.LONG(), pa.int64()),
        (Types.SHORT(), pa.int16()),
        (Types.BYTE(), pa.int8()),
        (Types.FLOAT(), pa.float32()),
        (Types.DOUBLE(), pa.float64()),
        (Types.BOOLEAN(), pa.bool_()),
        (Types.CHAR(), pa.string()),
        (Types.SQL_DATE(), pa.date32()),
        (Types.SQL_TIME(), pa.time64("us")),
        (Types.SQL_TIMESTAMP(), pa.timestamp("us")),
        (Types.INSTANT(), pa.timestamp("us", tz="UTC")),
        (Types.PICKLED_BYTE_ARRAY(), pa.binary()),
        (Types.PRIMITIVE_ARRAY(Types.BYTE()), pa.binary()),
        (Types.PRIMITIVE_ARRAY(Types.INT()), pa.list_(pa.int32())),
        (Types.BASIC_ARRAY(Types.STRING()), pa.list_(pa.string())),
        (Types.OBJECT_ARRAY(Types.DOUBLE()), pa.list_(pa.float64())),
        (Types.LIST(Types.LONG()), pa.list_(pa.int64())),
        (Types.MAP(Types.STRING(), Types.LONG()), pa.map_(pa.string(), pa.int64())),
        (
            Types.ROW([Types.STRING(), Types.INT()]),
            pa.struct([("f0", pa.string()), ("f1", pa.int32())]),
        ),
        (Types.TUPLE([Types.LONG()]), pa.struct([("f0", pa.int64())])),
        (
            Types.ROW_NAMED(["user", "n"], [Types.STRING(), Types.LONG()]),
            pa.struct([("user", pa.string()), ("n", pa.int64())]),
        ),
    ],
    ids=repr,
)
def test_pyflink_types_map_to_statecore_type_info(types: Any, arrow: pa.DataType) -> None:
    assert isinstance(types, TypeInfo) and types.arrow == arrow
    info = sc.ValueStateDescriptor("v", types.spec).value_info  # what statecore declares
    assert (info.arrow, info.pickled, info.accepted) == (arrow, types.pickled, types.accepted)


def test_pyflink_types_statecore_cannot_store_raise() -> None:
    for unsupported in (Types.BIG_INT, Types.BIG_DEC):
        with pytest.raises(PyFlinkUnsupportedError, match="decimal128"):
            unsupported()
    with pytest.raises(PyFlinkUnsupportedError, match="cannot be nested"):
        Types.ROW([Types.PICKLED_BYTE_ARRAY()])
    with pytest.raises(PyFlinkUnsupportedError, match="list state's element"):
        ValueStateDescriptor("v", Types.LIST(Types.PICKLED_BYTE_ARRAY())).to_statecore()


def test_pyflink_ttl_builder_maps_onto_statecore_ttl() -> None:
    config = (
        StateTtlConfig.new_builder(Time.seconds(3))
        .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)
        .set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)
        .cleanup_full_snapshot()
        .build()
    )
    ttl = config.to_statecore()
    assert ttl is not None and ttl.ttl == timedelta(seconds=3)
    assert ttl.update_type is UpdateType.ON_READ_AND_WRITE
    assert ttl.visibility is StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP
    assert ttl.cleanup is CleanupStrategy.FULL_SNAPSHOT
    assert config.is_enabled() and config.get_ttl() == Time.milliseconds(3000)
    assert config.get_cleanup_strategies().in_full_snapshot()

    incremental = (
        StateTtlConfig.new_builder(Duration.of_minutes(1))
        .update_ttl_on_create_and_write()
        .never_return_expired()
        .use_processing_time()
        .cleanup_incrementally(10, True)
        .disable_cleanup_in_background()
        .build()
        .to_statecore()
    )
    assert incremental is not None and incremental.cleanup is CleanupStrategy.INCREMENTAL
    assert (incremental.cleanup_size, incremental.run_cleanup_for_every_record) == (10, True)
    assert incremental.ttl == timedelta(minutes=1)
    assert incremental.update_type is UpdateType.ON_CREATE_AND_WRITE
    default = StateTtlConfig.new_builder(Time.hours(1)).build().to_statecore()
    assert default is not None and default.cleanup is CleanupStrategy.ON_READ
    assert default.visibility is StateVisibility.NEVER_RETURN_EXPIRED


def test_pyflink_ttl_disabled_update_type_leaves_ttl_off() -> None:
    config = (
        StateTtlConfig.new_builder(Time.seconds(1))
        .set_update_type(StateTtlConfig.UpdateType.Disabled)
        .build()
    )
    descriptor = ValueStateDescriptor("v", Types.LONG())
    descriptor.enable_time_to_live(config)
    assert not config.is_enabled() and descriptor.to_statecore().ttl is None


def test_pyflink_ttl_unsupported_builder_options_raise() -> None:
    builder = StateTtlConfig.new_builder(Time.seconds(1))
    with pytest.raises(PyFlinkUnsupportedError, match="cleanup_incrementally"):
        builder.cleanup_in_rocksdb_compact_filter(1000)
    both = builder.cleanup_full_snapshot().cleanup_incrementally(5, False)
    with pytest.raises(PyFlinkUnsupportedError, match="one cleanup strategy"):
        both.build()
    with pytest.raises(ConfigError, match="positive"):  # statecore's own check, at once
        ValueStateDescriptor("v", Types.LONG()).enable_time_to_live(
            StateTtlConfig.new_builder(Time.seconds(0)).build()
        )
    assert issubclass(PyFlinkUnsupportedError, NotImplementedError)
