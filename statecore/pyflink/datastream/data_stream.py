"""PyFlink's ``DataStream`` and ``KeyedStream`` (``pyflink.datastream.data_stream``): each call
adds to an immutable :class:`Plan`; a sink (``print()``, ``sink_to``) registers it with the
environment, whose ``execute`` runs it on Spark
(:mod:`statecore.pyflink.datastream.execution`).

A plan is one statecore keyed operator: the steps before ``key_by`` (``map``, ``filter``,
``flat_map``, ``assign_timestamps_and_watermarks``) run where the source is read, the keyed
function (``process``, ``reduce``, or a ``map``/``filter``/``flat_map`` of the keyed stream)
in statecore's keyed runtime, and the steps after it in the same task. A second ``key_by``
after a keyed function, windows, joins, unions and side outputs raise
:class:`~statecore.errors.PyFlinkUnsupportedError`, naming what to use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.pyflink.common.watermark_strategy import WatermarkStrategy
from statecore.pyflink.datastream.functions import KeyedProcessFunction
from statecore.pyflink.datastream.operators import Reduce, Step

__all__ = ["DataStream", "DataStreamSink", "KeyedStream", "Plan"]


class Environment(Protocol):
    """What the layer reads of the job's ``StreamExecutionEnvironment`` (described here, not
    imported: its module imports this one, and statecore's modules import no cycle, see
    tests/test_import_cycles.py)."""

    spark_session: Any
    _parallelism: int | None
    _max_parallelism: int | None
    _checkpoint_interval: timedelta | None
    _backend: str

    @property
    def _batch(self) -> bool: ...

    def get_parallelism(self) -> int: ...

    def _add_plan(self, plan: Plan) -> None: ...


@dataclass(frozen=True)
class Plan:
    """A job as the calls so far describe it."""

    source: Any
    source_type: Any = None
    source_name: str | None = None
    before: tuple[Step, ...] = ()
    watermarks: WatermarkStrategy | None = None
    key_selector: Callable[[Any], Any] | None = None
    key_type: Any = None
    function: Any = None
    function_type: Any = None
    after: tuple[Step, ...] = ()
    element_type: Any = None
    """The declared type of the stream's elements so far (``None``: pickled)."""
    sink: Any = None
    sink_identifier: str | None = None
    keyed: bool = False
    """Whether the keyed stage is set (``process``, ``reduce``, or a keyed ``map``...)."""

    def add_step(self, step: Step) -> Plan:
        if self.keyed:
            return dataclasses.replace(
                self, after=self.after + (step,), element_type=step.output_type
            )
        return dataclasses.replace(
            self, before=self.before + (step,), element_type=step.output_type
        )


def _unsupported(what: str, instead: str) -> PyFlinkUnsupportedError:
    return PyFlinkUnsupportedError(f"{what}: {instead} ({COMING_FROM_PYFLINK})")


class DataStream:
    """A stream of elements: transform it, key it, or sink it."""

    def __init__(self, env: Environment, plan: Plan) -> None:
        self._env = env
        self._plan = plan

    def _with(self, plan: Plan) -> DataStream:
        return DataStream(self._env, plan)

    def get_type(self) -> Any:
        return self._plan.element_type

    def get_execution_environment(self) -> Environment:
        return self._env

    # operator settings Spark owns: accepted, nothing to do
    def name(self, name: str) -> DataStream:
        return self

    def uid(self, uid: str) -> DataStream:
        return self

    def set_uid_hash(self, uid_hash: str) -> DataStream:
        return self

    def set_description(self, description: str) -> DataStream:
        return self

    def set_parallelism(self, parallelism: int) -> DataStream:
        return self

    def set_max_parallelism(self, max_parallelism: int) -> DataStream:
        return self

    def slot_sharing_group(self, slot_sharing_group: Any) -> DataStream:
        return self

    def disable_chaining(self) -> DataStream:
        return self

    def start_new_chain(self) -> DataStream:
        return self

    def force_non_parallel(self) -> DataStream:
        return self

    # transformations
    def map(self, func: Any, output_type: Any = None) -> DataStream:
        return self._with(self._plan.add_step(Step("map", func, output_type)))

    def flat_map(self, func: Any, output_type: Any = None) -> DataStream:
        return self._with(self._plan.add_step(Step("flat_map", func, output_type)))

    def filter(self, func: Any) -> DataStream:
        step = Step("filter", func, self._plan.element_type)
        return self._with(self._plan.add_step(step))

    def assign_timestamps_and_watermarks(self, watermark_strategy: WatermarkStrategy) -> DataStream:
        if self._plan.keyed:
            raise _unsupported(
                "assign_timestamps_and_watermarks after a keyed function",
                "assign timestamps before key_by (or on the source with from_source)",
            )
        return self._with(dataclasses.replace(self._plan, watermarks=watermark_strategy))

    def key_by(self, key_selector: Any, key_type: Any = None) -> KeyedStream:
        if self._plan.keyed:
            raise _unsupported(
                "key_by after a keyed function",
                "statecore runs one keyed operator per job; write its output to a table "
                "(sink_to(DeltaSink(path))) and key it in a second job",
            )
        selector = getattr(key_selector, "get_key", key_selector)
        plan = dataclasses.replace(self._plan, key_selector=selector, key_type=key_type)
        return KeyedStream(self._env, plan)

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        raise _unsupported(
            "DataStream.process on a stream without key_by",
            "key the stream first (key_by) and use a KeyedProcessFunction",
        )

    def union(self, *streams: DataStream) -> DataStream:
        raise _unsupported("union", "union the Spark DataFrames and run keyed_process on them")

    def connect(self, ds: Any) -> Any:
        raise _unsupported(
            "connect", "join the inputs in Spark first, or keep the other side in keyed state"
        )

    def window_all(self, window_assigner: Any) -> Any:
        raise _unsupported(
            "window_all", "key the stream and keep windows in state with event-time timers"
        )

    def partition_custom(self, *args: Any) -> Any:
        raise _unsupported("partition_custom", "statecore partitions by key group (key_by)")

    def broadcast(self, *args: Any) -> Any:
        raise _unsupported(
            "broadcast", "statecore's BroadcastState through the Pythonic API (docs/state.md)"
        )

    def shuffle(self) -> DataStream:
        return self

    def rebalance(self) -> DataStream:
        return self

    def forward(self) -> DataStream:
        return self

    def rescale(self) -> DataStream:
        return self

    def get_side_output(self, output_tag: Any) -> Any:
        raise _unsupported(
            "get_side_output",
            "ctx.output(tag, value) works in the function; run it with statecore's "
            "keyed_process(side_outputs={tag: SideOutput(table, schema)}), which commits each "
            "side output to its own Delta table (docs/side-outputs.md)",
        )

    def execute_and_collect(self, *args: Any, **kwargs: Any) -> Any:
        raise _unsupported(
            "execute_and_collect", "print() or sink_to(DeltaSink(path)) and read the table"
        )

    # sinks
    def _sink(self, sink: Any, identifier: str | None = None) -> DataStreamSink:
        plan = dataclasses.replace(self._plan, sink=sink, sink_identifier=identifier)
        self._env._add_plan(plan)
        return DataStreamSink(plan)

    def print(self, sink_identifier: str | None = None) -> DataStreamSink:
        return self._sink("print", sink_identifier)

    def sink_to(self, sink: Any) -> DataStreamSink:
        from statecore.pyflink.datastream.connectors import DeltaSink, FileSink

        if not isinstance(sink, FileSink | DeltaSink):
            raise _unsupported(
                f"sink_to({type(sink).__name__})",
                "statecore writes FileSink (row format) and DeltaSink(path)",
            )
        return self._sink(sink)

    def add_sink(self, sink_func: Any) -> DataStreamSink:
        raise _unsupported("add_sink", "use sink_to(FileSink...) or sink_to(DeltaSink(path))")


class KeyedStream(DataStream):
    """A stream keyed by ``key_by``: ``process`` with a ``KeyedProcessFunction``, ``reduce``, or
    ``map``/``filter``/``flat_map`` (keyed, as in Flink)."""

    def _keyed(self, function: Any, output_type: Any) -> DataStream:
        plan = dataclasses.replace(
            self._plan,
            function=function,
            function_type=output_type,
            element_type=output_type,
            keyed=True,
        )
        return DataStream(self._env, plan)

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        if not isinstance(func, KeyedProcessFunction):
            raise _unsupported(
                f"KeyedStream.process({type(func).__name__})",
                "statecore runs a KeyedProcessFunction "
                "(from statecore.pyflink.datastream import KeyedProcessFunction)",
            )
        return self._keyed(func, output_type)

    def reduce(self, func: Any) -> DataStream:
        """The running reduction per key (emitted per element in ``STREAMING``, once per key
        at the end in ``BATCH``, as in Flink)."""
        return self._keyed(Reduce(func, emit_each=True), self._plan.element_type)

    def map(self, func: Any, output_type: Any = None) -> DataStream:
        return self._keyed(None, self._plan.element_type).map(func, output_type)

    def flat_map(self, func: Any, output_type: Any = None) -> DataStream:
        return self._keyed(None, self._plan.element_type).flat_map(func, output_type)

    def filter(self, func: Any) -> DataStream:
        return self._keyed(None, self._plan.element_type).filter(func)

    def sum(self, position_to_sum: Any = 0) -> DataStream:
        raise _unsupported("KeyedStream.sum", "reduce(lambda a, b: ...) with the sum")

    def window(self, window_assigner: Any) -> Any:
        raise _unsupported(
            "KeyedStream.window", "a KeyedProcessFunction with event-time timers (docs/pyflink.md)"
        )

    def count_window(self, *args: Any) -> Any:
        raise _unsupported("KeyedStream.count_window", "a KeyedProcessFunction with a count state")

    def print(self, sink_identifier: str | None = None) -> DataStreamSink:
        return self._keyed(None, self._plan.element_type).print(sink_identifier)

    def sink_to(self, sink: Any) -> DataStreamSink:
        return self._keyed(None, self._plan.element_type).sink_to(sink)


class DataStreamSink:
    """What ``print()`` and ``sink_to`` return; its settings are accepted and do nothing."""

    def __init__(self, plan: Plan) -> None:
        self._plan = plan

    def name(self, name: str) -> DataStreamSink:
        return self

    def uid(self, uid: str) -> DataStreamSink:
        return self

    def set_parallelism(self, parallelism: int) -> DataStreamSink:
        return self

    def set_description(self, description: str) -> DataStreamSink:
        return self

    def disable_chaining(self) -> DataStreamSink:
        return self

    def slot_sharing_group(self, slot_sharing_group: Any) -> DataStreamSink:
        return self
