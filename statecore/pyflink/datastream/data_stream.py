"""PyFlink's ``DataStream`` and ``KeyedStream`` (``pyflink.datastream.data_stream``): each call
adds to an immutable :class:`Plan`; a sink (``print()``, ``sink_to``) registers it with the
environment, whose ``execute`` runs it on Spark
(:mod:`statecore.pyflink.datastream.execution`).

A plan is one statecore keyed operator: the steps before ``key_by`` (``map``, ``filter``,
``flat_map``, ``assign_timestamps_and_watermarks``) run where the source is read, the keyed
function (``process``, ``reduce``, or a ``map``/``filter``/``flat_map`` of the keyed stream)
in statecore's keyed runtime, and the steps after it in the same task. ``union`` and
``connect`` give a plan several inputs (:attr:`Plan.inputs`), unioned before the keyed stage.
Windows (``window``, ``count_window``) make the keyed function a window operator
(:mod:`statecore.pyflink.datastream.windowed_stream`). ``get_side_output(tag)`` gives a stream
of the values the keyed stage's functions emit to ``tag`` (a plan with :attr:`Plan.side_tag`,
its own steps and sink), written by the same keyed run to a table of its own. A second
``key_by`` after a keyed function and joins raise
:class:`~statecore.errors.PyFlinkUnsupportedError`, naming what to use.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from statecore.config import check_name
from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.pyflink.common.typeinfo import Types
from statecore.pyflink.common.watermark_strategy import WatermarkStrategy
from statecore.pyflink.datastream.broadcast import BroadcastConnectedStream, BroadcastStream
from statecore.pyflink.datastream.connected_streams import ConnectedStreams
from statecore.pyflink.datastream.functions import KeyedProcessFunction, ProcessFunction
from statecore.pyflink.datastream.operators import Process, Reduce, Step
from statecore.pyflink.datastream.output_tag import OutputTag
from statecore.pyflink.datastream.windowed_stream import AllWindowedStream, WindowedStream
from statecore.runtime import windows as sc_windows

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
    key_selector: Any = None
    """The ``key_by`` argument: a function or a ``KeySelector``."""
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
    uid: str | None = None
    """The keyed operator's ``uid``: the operator whose state a restore matches."""
    parallelism: int | None = None
    """The keyed operator's own ``set_parallelism`` (else the environment's)."""
    max_parallelism: int | None = None
    """The keyed operator's own ``set_max_parallelism``: its key groups."""
    after_parallelism: tuple[int, ...] = ()
    """``set_parallelism`` of steps after the keyed operator (they run in its tasks)."""
    inputs: tuple[Plan, ...] = ()
    """A job of several inputs (``union``, ``connect``): each input's plan (its source, steps,
    timestamps and key selector); this plan's own ``source`` is then ``None``."""
    tagged: bool = False
    """Whether each element carries its input's number (``connect``)."""
    side_tag: Any = None
    """A side output's stream (``get_side_output``): the tag whose values it carries; the
    rest of the plan is the keyed stage that emits them."""
    side_steps: tuple[Step, ...] = ()
    """The steps of a side output's stream (run in the keyed stage's task)."""
    broadcast: bool = False
    """An input that is a broadcast stream (``broadcast``): its elements reach every task of
    the keyed stage."""

    def add_step(self, step: Step) -> Plan:
        if self.side_tag is not None:
            steps = self.side_steps + (step,)
            return dataclasses.replace(self, side_steps=steps, element_type=step.output_type)
        return self._add_step(step)

    @property
    def keyed_operator_is_last(self) -> bool:
        """Whether the last operator is the keyed one (its settings are the keyed stage's)."""
        return (
            self.side_tag is None
            and self.keyed
            and len(self.after) == (0 if self.function is not None else 1)
        )

    def _add_step(self, step: Step) -> Plan:
        if self.keyed:
            return dataclasses.replace(
                self, after=self.after + (step,), element_type=step.output_type
            )
        return dataclasses.replace(
            self, before=self.before + (step,), element_type=step.output_type
        )


def _all_windows_key(value: Any) -> int:
    """The one key of ``window_all``: every element in one key's windows."""
    return 0


def _unsupported(what: str, instead: str) -> PyFlinkUnsupportedError:
    return PyFlinkUnsupportedError(f"{what}: {instead} ({COMING_FROM_PYFLINK})")


MAX_MAX_PARALLELISM = 1 << 15
"""Flink's upper bound of the max parallelism (32768 key groups)."""


def _positive(method: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _unsupported(f"{method}({value!r})", "give a positive int")


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

    # operator settings: the keyed operator's are honoured; Spark owns the others'
    def name(self, name: str) -> DataStream:
        return self

    def uid(self, uid: str) -> DataStream:
        """The operator's id: on the keyed operator (the only one with state), the name its
        state is checkpointed under and matched by on restore; a stateless operator has no
        state to match."""
        check_name("operator", uid)
        if not self._plan.keyed_operator_is_last:
            return self
        return self._with(dataclasses.replace(self._plan, uid=uid))

    def set_uid_hash(self, uid_hash: str) -> DataStream:
        return self

    def set_description(self, description: str) -> DataStream:
        return self

    def set_parallelism(self, parallelism: int) -> DataStream:
        """The keyed operator's tasks; an operator after it runs in its tasks (the same
        parallelism or a clear error at execute); one before ``key_by`` in the tasks that read
        the source (Spark decides: a clear error)."""
        _positive("set_parallelism", parallelism)
        plan = self._plan
        if plan.keyed_operator_is_last:
            return self._with(dataclasses.replace(plan, parallelism=parallelism))
        if plan.keyed:
            pinned = plan.after_parallelism + (parallelism,)
            return self._with(dataclasses.replace(plan, after_parallelism=pinned))
        raise _unsupported(
            f"set_parallelism({parallelism}) on an operator before key_by",
            "Spark runs the functions before key_by in the tasks that read the source; set the "
            "keyed operator's parallelism (or the environment's)",
        )

    def set_max_parallelism(self, max_parallelism: int) -> DataStream:
        """The keyed operator's key groups (Flink's max parallelism); a stateless operator has
        no key groups."""
        _positive("set_max_parallelism", max_parallelism)
        if max_parallelism > MAX_MAX_PARALLELISM:
            raise _unsupported(
                f"set_max_parallelism({max_parallelism})",
                f"the max parallelism is at most {MAX_MAX_PARALLELISM}, as in Flink",
            )
        if not self._plan.keyed_operator_is_last:
            return self
        return self._with(dataclasses.replace(self._plan, max_parallelism=max_parallelism))

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
        plan = dataclasses.replace(self._plan, key_selector=key_selector, key_type=key_type)
        return KeyedStream(self._env, plan)

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        """A :class:`~statecore.pyflink.datastream.functions.ProcessFunction` on a stream
        without a key: the job's operator when nothing is keyed (elements keyed by position,
        each subtask keeps its elements' order), else a step after the keyed one."""
        if not isinstance(func, ProcessFunction):
            raise _unsupported(
                f"DataStream.process({type(func).__name__})",
                "a stream without key_by runs a ProcessFunction "
                "(from statecore.pyflink.datastream import ProcessFunction); key the stream "
                "(key_by) for a KeyedProcessFunction",
            )
        if self._plan.keyed:
            return self._with(self._plan.add_step(Step("process", func, output_type)))
        plan = dataclasses.replace(
            self._plan,
            function=Process(func),
            function_type=output_type,
            element_type=output_type,
            keyed=True,
        )
        return DataStream(self._env, plan)

    def union(self, *streams: DataStream) -> DataStream:
        """One stream of the elements of this one and ``streams`` (of one type), before
        the keyed stage: their sources are read apart and unioned before it. A keyed stream
        gives its elements (as PyFlink's ``KeyedStream.union``: the key is dropped; key the
        union again with ``key_by``)."""
        inputs: list[Plan] = []
        for stream in (self, *streams):
            plan = stream._plan
            if plan.keyed:
                raise _unsupported(
                    "union after a keyed function",
                    "statecore runs one keyed operator per job; union the streams before it",
                )
            if plan.key_selector is not None:
                plan = dataclasses.replace(plan, key_selector=None, key_type=None)
            simple = (
                bool(plan.inputs) and not plan.tagged and not plan.before and not plan.watermarks
            )
            inputs += plan.inputs if simple else (plan,)
        union = Plan(source=None, inputs=tuple(inputs), element_type=self._plan.element_type)
        return self._with(union)

    def connect(self, ds: Any) -> Any:
        """Two streams into one two-input function (:mod:`.connected_streams`), or this stream
        with a :class:`~statecore.pyflink.datastream.broadcast.BroadcastStream` (the broadcast
        state pattern, :mod:`.broadcast`)."""
        if isinstance(ds, BroadcastStream):
            return BroadcastConnectedStream(self, ds)
        if not isinstance(ds, DataStream):
            raise _unsupported(
                f"connect({type(ds).__name__})",
                "statecore connects two DataStreams, or a stream and a BroadcastStream",
            )
        return ConnectedStreams(self, ds)

    def window_all(self, window_assigner: Any) -> AllWindowedStream:
        """Windows of the whole stream (:class:`~.windowed_stream.AllWindowedStream`): every
        element keyed by one constant key, on the keyed window operator at parallelism 1."""
        if self._plan.keyed:
            raise _unsupported(
                "window_all after a keyed function",
                "statecore runs one keyed operator per job; window the stream before it",
            )
        keyed = self.key_by(_all_windows_key, key_type=Types.INT())
        return AllWindowedStream(keyed.window(window_assigner))

    def count_window_all(self, size: int, slide: int | None = None) -> AllWindowedStream:
        """Windows of ``size`` elements of the whole stream, every ``slide`` elements (tumbling
        without it), at parallelism 1."""
        if self._plan.keyed:
            raise _unsupported(
                "count_window_all after a keyed function",
                "statecore runs one keyed operator per job; window the stream before it",
            )
        keyed = self.key_by(_all_windows_key, key_type=Types.INT())
        return AllWindowedStream(keyed.count_window(size, slide))

    def partition_custom(self, *args: Any) -> Any:
        raise _unsupported("partition_custom", "statecore partitions by key group (key_by)")

    def broadcast(self, *broadcast_state_descriptors: Any) -> BroadcastStream:
        r"""A :class:`~statecore.pyflink.datastream.broadcast.BroadcastStream` with the broadcast
        states ``broadcast_state_descriptors`` (``MapStateDescriptor``\ s): connect a stream
        to it (the broadcast state pattern)."""
        return BroadcastStream(self, broadcast_state_descriptors)

    def shuffle(self) -> DataStream:
        return self

    def rebalance(self) -> DataStream:
        return self

    def forward(self) -> DataStream:
        return self

    def rescale(self) -> DataStream:
        return self

    def get_side_output(self, output_tag: Any) -> DataStream:
        """The values the job's functions emit to ``output_tag`` (``yield output_tag, value``
        or ``ctx.output(output_tag, value)``), typed by the tag's ``type_info``: a stream to
        ``map``/``filter``/``flat_map`` and sink, run in the keyed stage's task."""
        plan = self._plan
        if not isinstance(output_tag, OutputTag):
            raise _unsupported(
                f"get_side_output({output_tag!r})",
                "give an OutputTag (from statecore.pyflink.datastream import OutputTag)",
            )
        if plan.side_tag is not None:
            raise _unsupported(
                "get_side_output of a side output's stream",
                "a side output's stream has no side outputs; call get_side_output on the "
                "stream of the function that emits to the tag",
            )
        if not plan.keyed or (plan.function is None and not plan.after):
            raise _unsupported(
                "get_side_output on a stream no process function made",
                "call it on the result of process(...) (or of a window function)",
            )
        side = dataclasses.replace(
            plan,
            side_tag=output_tag,
            element_type=output_tag.get_type_info(),
            sink=None,
            sink_identifier=None,
        )
        return self._with(side)

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

    def window(self, window_assigner: Any) -> WindowedStream:
        """Windows of each key (docs/pyflink.md, "Windows")."""
        return WindowedStream.of(self._keyed, self._plan.element_type, window_assigner, self._env)

    def count_window(self, size: int, slide: int | None = None) -> WindowedStream:
        """Windows of ``size`` elements of each key, every ``slide`` elements (tumbling without
        it): a global window with a count trigger (and a count evictor), as Flink builds it."""
        windowed = self.window(sc_windows.GlobalWindows())
        if slide is None:
            return windowed.trigger(sc_windows.PurgingTrigger(sc_windows.CountTrigger(size)))
        return windowed.evictor(sc_windows.CountEvictor(size)).trigger(
            sc_windows.CountTrigger(slide)
        )

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
