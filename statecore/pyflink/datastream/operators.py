"""What a ported DataStream job runs inside Spark's tasks: :class:`Prepare` (the steps before
``key_by``, the timestamp assigner and the key selector, in the task that reads the source) and
:class:`PipelineFunction` (the keyed stage: the user's ``KeyedProcessFunction``, or a reduce, or
no function at all, then the steps after it, each output as the sink's row). Both are plain
Python, pickled to the tasks; the planning is in :mod:`statecore.spark.pyflink`.

>>> prepare = Prepare(steps=(Step("flat_map", str.split, None),), key_selector=lambda w: w,
...                   key_encoding="string", decode="text")
>>> [(key, seq) for key, _, _, seq in prepare.rows([("to be", None)], partition=0)]
[('to', 0), ('be', 1)]
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from statecore.backends.timers import MAX_WATERMARK
from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.pyflink.common.types import to_python, to_storage
from statecore.pyflink.datastream.formatting import flink_string
from statecore.pyflink.datastream.functions import (
    KeyedProcessFunction,
    ProcessContext,
    RuntimeContext,
)
from statecore.pyflink.datastream.rich import (
    NonKeyedRuntimeContext,
    TaskInfo,
    close_functions,
    open_functions,
)
from statecore.pyflink.datastream.state import ValueStateDescriptor
from statecore.runtime import functions as sc
from statecore.runtime.co_process import TaggedElement
from statecore.runtime.side_outputs import OutputTag
from statecore.types import PICKLED

__all__ = [
    "KEYED_BY_SEQUENCE",
    "CheckpointedPipelineFunction",
    "PipelineFunction",
    "Prepare",
    "Process",
    "Reduce",
    "SideRoute",
    "Step",
    "side_output_of",
]

KEYED_BY_SEQUENCE = "sequence"
"""The key encoding of a job without ``key_by``: each element its own key (its position)."""

_SEQ_BITS = 40
_INPUT_BITS = 56
"""A task's outputs are numbered ``partition << 40 | n``: the source's order, kept by the
keyed stage's ``order_by``."""


@dataclass(frozen=True)
class Step:
    """A ``map``, ``filter`` or ``flat_map``: the function (or its ``map``/``filter``/
    ``flat_map`` method) and the declared output type."""

    kind: str
    function: Any
    output_type: Any

    def call(self) -> Callable[[Any], Any]:
        return getattr(self.function, self.kind, self.function)  # type: ignore[no-any-return]


def side_output_of(out: Any) -> tuple[Any, Any] | None:
    """``(tag, value)`` when a function yielded ``out`` to a side output (PyFlink's
    ``yield output_tag, value``), else ``None``."""
    if type(out) is tuple and len(out) == 2 and isinstance(out[0], OutputTag):
        return out
    return None


def run_steps(steps: tuple[Step, ...], value: Any, ctx: Any = None) -> Iterator[Any]:
    """``value`` through ``steps``: what comes out at the end (none, one or many). ``ctx`` is
    the keyed stage's per-record context (a ``process`` step's context is made from it; what
    the step yields to a side output, ``yield output_tag, value``, goes to ``ctx.output``)."""
    if not steps:
        yield value
        return
    step, rest = steps[0], steps[1:]
    if step.kind == "process":
        outputs: Iterable[Any] = step.function.process_element(value, ProcessContext(ctx)) or ()
        for out in outputs:
            side = side_output_of(out)
            if side is not None:
                ctx.output(*side)
                continue
            yield from run_steps(rest, to_python(out, step.output_type), ctx)
        return
    function = step.call()
    if step.kind == "filter":
        if function(value):
            yield from run_steps(rest, value, ctx)
        return
    outputs = function(value) if step.kind == "flat_map" else (function(value),)
    for out in outputs or ():
        yield from run_steps(rest, to_python(out, step.output_type), ctx)


def encode_key(key: Any, encoding: str) -> Any:
    """The key column's value: a string, a long, or the pickled key."""
    if encoding == "string":
        if not isinstance(key, str):
            raise TypeError(f"key_by(..., key_type=Types.STRING()): key {key!r} is not a str")
        return key
    if encoding == "long":
        if not isinstance(key, int) or isinstance(key, bool):
            raise TypeError(f"key_by(..., key_type=Types.LONG()): key {key!r} is not an int")
        return key
    return pickle.dumps(key, protocol=5)


@dataclass(frozen=True)
class Prepare:
    """The steps before ``key_by``, the event time and the key, per source record."""

    steps: tuple[Step, ...]
    key_selector: Callable[[Any], Any] | None
    key_encoding: str
    decode: str
    """``pickle`` (a collection's elements) or ``text`` (a line, a Kafka value)."""
    source_type: Any = None
    timestamp_assigner: Any = None
    event_time: bool = False
    input: int = 0
    """The input's number in a job of several (``union``, ``connect``): its rows are numbered
    apart from the others', after them."""
    tagged: bool = False
    """Each element as a :class:`~statecore.runtime.co_process.TaggedElement` of ``input``
    (``connect``: a two-input function dispatches on it)."""

    operator: str = "source"
    """The task's name in the functions' runtime context."""
    max_parallelism: int | None = None
    broadcast_keys: tuple[Any, ...] = ()
    """A broadcast input (``broadcast``): each element once under each of these keys (one in
    each task's key-group range of the keyed stage), as a
    :class:`~statecore.runtime.co_process.TaggedElement` of input 2."""

    def __call__(
        self,
        records: Iterable[tuple[Any, int | None]],
        partition: int,
        partitions: int | None = None,
    ) -> Iterator[tuple[Any, ...]]:
        return self.rows(records, partition=partition, partitions=partitions)

    def functions(self) -> list[Any]:
        """The user functions this stage runs: its steps' and the key selector."""
        return [s.function for s in self.steps] + [self.key_selector]

    def rows(
        self,
        records: Iterable[tuple[Any, int | None]],
        *,
        partition: int,
        partitions: int | None = None,
    ) -> Iterator[tuple[Any, bytes, int | None, int]]:
        """``(key, pickled element, event time, sequence)`` for each element that comes out of
        ``(element, record timestamp)`` records, in task ``partition`` of ``partitions`` (its
        functions opened first and closed at the end, non-keyed)."""
        info = TaskInfo(
            operator=self.operator,
            subtask_index=partition,
            parallelism=partitions,
            max_parallelism=self.max_parallelism or TaskInfo.max_parallelism,
        )
        open_functions(self.functions(), NonKeyedRuntimeContext(info))
        try:
            yield from self._rows(records, partition)
        finally:
            close_functions(self.functions())

    def _rows(
        self, records: Iterable[tuple[Any, int | None]], partition: int
    ) -> Iterator[tuple[Any, bytes, int | None, int]]:
        seq = self.input << _INPUT_BITS | partition << _SEQ_BITS
        assigner = self.timestamp_assigner
        selector = getattr(self.key_selector, "get_key", self.key_selector)
        for raw, record_time in records:
            element = pickle.loads(raw) if self.decode == "pickle" else raw
            element = to_python(element, self.source_type)
            for value in run_steps(self.steps, element):
                ts = record_time
                if assigner is not None:
                    ts = assigner.extract_timestamp(
                        value, MIN_RECORD_TIME if record_time is None else record_time
                    )
                if self.event_time and ts is None:
                    raise PyFlinkUnsupportedError(
                        f"element {value!r} has no timestamp: give the watermark strategy a "
                        f"timestamp assigner ({COMING_FROM_PYFLINK})"
                    )
                if self.broadcast_keys:
                    copy = pickle.dumps(TaggedElement(2, value), protocol=5)
                    for key in self.broadcast_keys:
                        yield key, copy, ts, seq
                    seq += 1
                    continue
                if selector is None:
                    key = seq
                else:
                    key = encode_key(selector(value), self.key_encoding)
                out = TaggedElement(self.input, value) if self.tagged else value
                yield key, pickle.dumps(out, protocol=5), ts, seq
                seq += 1


MIN_RECORD_TIME = -(1 << 63)
"""The record timestamp an assigner gets for a record without one (Flink's Long.MIN_VALUE)."""


@dataclass(frozen=True)
class SideRoute:
    """Where the values a job's functions emit to side output ``tag`` go: through ``steps``
    (the ``map``/``filter``/``flat_map`` of ``get_side_output(tag)``'s stream), each a row of
    ``output`` (as :class:`PipelineFunction`'s) of statecore's side output ``name``."""

    tag: str
    name: str
    steps: tuple[Step, ...] = ()
    tag_type: Any = None
    """The tag's ``type_info``: the type of the values emitted to it."""
    output_type: Any = None
    output: str = "text"

    def rows(self, value: Any, ctx: Any, subtask: int) -> Iterator[tuple[Any, ...]]:
        for out in run_steps(self.steps, to_python(value, self.tag_type), ctx):
            yield sink_row(out, self.output_type, self.output, subtask)


def sink_row(value: Any, info: Any, output: str, subtask: int) -> tuple[Any, ...]:
    """``value`` as a sink's row: ``text`` (the subtask and the line Flink prints) or
    ``columns`` (the fields of a typed value, a Delta sink's row)."""
    if output == "text":
        return (subtask, flink_string(value, info))
    if getattr(info, "kind", "") in ("ROW", "TUPLE"):
        if isinstance(value, dict):
            return tuple(to_storage(value[n]) for n in info.field_names)
        return tuple(to_storage(value))
    return (to_storage(value),)


class _StageContext:
    """statecore's context as the job's functions see it: the pickled key decoded (a job keyed
    without a key type), and what they emit to side outputs routed by tag name to the side
    outputs the job reads (``get_side_output``), each value through its stream's steps; a tag
    no stream reads drops its values, as in Flink."""

    __slots__ = ("_ctx", "_raw", "_key", "_pickled", "_routes", "_subtask")

    def __init__(
        self, ctx: Any, pickled: bool, routes: dict[str, tuple[SideRoute, ...]], subtask: int
    ) -> None:
        self._ctx = ctx
        self._raw: Any = None
        self._key: Any = None
        self._pickled = pickled
        self._routes = routes
        self._subtask = subtask

    @property
    def current_key(self) -> Any:
        raw = self._ctx.current_key
        if not self._pickled:
            return raw
        if raw is not self._raw:
            self._raw, self._key = raw, pickle.loads(raw)
        return self._key

    @property
    def timestamp(self) -> int | None:
        return self._ctx.timestamp  # type: ignore[no-any-return]

    @property
    def timer_service(self) -> Any:
        return self._ctx.timer_service

    @property
    def time_domain(self) -> Any:
        return self._ctx.time_domain

    @property
    def namespace(self) -> str:
        return self._ctx.namespace  # type: ignore[no-any-return]

    def output(self, tag: Any, value: Any) -> None:
        name = getattr(tag, "name", None)
        if not isinstance(name, str):
            raise PyFlinkUnsupportedError(
                f"output({tag!r}, ...): the first argument is an OutputTag "
                f"(from statecore.pyflink.datastream import OutputTag) ({COMING_FROM_PYFLINK})"
            )
        for route in self._routes.get(name, ()):
            target = OutputTag(route.name)
            for row in route.rows(value, self, self._subtask):
                self._ctx.output(target, row)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


class Reduce(KeyedProcessFunction):
    """``KeyedStream.reduce``: the running reduction per key. In ``STREAMING`` each element
    emits the reduction so far; in ``BATCH`` only the final one per key is emitted (at the end
    of input), as Flink's batch mode does for rolling operations."""

    def __init__(self, reduce_function: Any, *, emit_each: bool) -> None:
        self.reduce_function = reduce_function
        self.emit_each = emit_each

    def open(self, runtime_context: Any) -> None:
        context: RuntimeContext = runtime_context
        self.state = context.get_state(ValueStateDescriptor("reduce", PICKLED))
        self.reduce = getattr(self.reduce_function, "reduce", self.reduce_function)
        open_functions([self.reduce_function], runtime_context)

    def close(self) -> None:
        close_functions([self.reduce_function])

    def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
        current = self.state.value()
        current = value if current is None else self.reduce(current, value)
        self.state.update(current)
        if self.emit_each:
            yield current
        else:
            ctx.timer_service().register_event_time_timer(MAX_WATERMARK)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Any]:
        yield self.state.value()


class Process(sc.KeyedProcessFunction):
    """``DataStream.process(ProcessFunction)`` on a stream without a key: the user's function in
    the keyed stage of a job keyed by position (:data:`KEYED_BY_SEQUENCE`), with a non-keyed
    runtime context and PyFlink's ``ProcessFunction.Context`` (the element's timestamp, the
    stage's watermark and processing time; no key state, no timers)."""

    def __init__(self, function: Any) -> None:
        self.function = function
        self._context = ProcessContext(None)

    def open(self, runtime_context: sc.RuntimeContext) -> None:
        open_functions([self.function], NonKeyedRuntimeContext(runtime_context))

    def close(self) -> None:
        close_functions([self.function])

    def process_element(self, value: Any, ctx: Any) -> Iterable[Any] | None:
        context = self._context
        if context._ctx is not ctx:
            context = self._context = ProcessContext(ctx)
        return self.function.process_element(value, context)  # type: ignore[no-any-return]

    def __getstate__(self) -> dict[str, Any]:
        return {"function": self.function}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["function"])  # type: ignore[misc]


class PipelineFunction(sc.KeyedProcessFunction):
    """The keyed stage of a ported job. ``output`` is ``text`` (each output as the line Flink
    prints or writes, with the subtask) or ``columns`` (the fields of a typed output, a Delta
    sink's row)."""

    def __init__(
        self,
        function: Any,
        steps: tuple[Step, ...],
        *,
        function_type: Any,
        output_type: Any,
        output: str,
        pickled_key: bool,
        side_routes: tuple[SideRoute, ...] = (),
    ) -> None:
        self.function = function
        self.steps = steps
        self.function_type = function_type
        self.output_type = output_type
        self.output = output
        self.pickled_key = pickled_key
        self.side_routes = side_routes
        self._routes: dict[str, tuple[SideRoute, ...]] = {}
        self._contexts: dict[int, Any] = {}
        self._subtask = 0

    def open(self, runtime_context: sc.RuntimeContext) -> None:
        """Open the keyed function, then the steps after it: the first step is the keyed
        function when there is no other (``key_by(...).flat_map(f)``: keyed state in ``open``),
        the rest run on the stream it outputs (non-keyed, as in Flink)."""
        self._subtask = runtime_context.subtask_index
        self._contexts = {}
        routes: dict[str, tuple[SideRoute, ...]] = {}
        for route in self.side_routes:
            routes[route.tag] = routes.get(route.tag, ()) + (route,)
        self._routes = routes
        steps = [s.function for s in self.steps]
        if self.function is not None:
            self.function.open(runtime_context)
        elif steps:
            open_functions(steps[:1], RuntimeContext(runtime_context))
            steps = steps[1:]
        open_functions(steps, NonKeyedRuntimeContext(runtime_context))

    def close(self) -> None:
        try:
            if self.function is not None:
                self.function.close()
        finally:
            close_functions(s.function for s in self.steps)

    def _context(self, ctx: Any) -> Any:
        wrapped = self._contexts.get(id(ctx))
        if wrapped is None or wrapped._ctx is not ctx:
            wrapped = self._contexts[id(ctx)] = _StageContext(
                ctx, self.pickled_key, self._routes, self._subtask
            )
        return wrapped

    def _emit(self, outputs: Iterable[Any] | None, ctx: Any) -> Iterator[tuple[Any, ...]]:
        for out in outputs or ():
            side = side_output_of(out)
            if side is not None:  # PyFlink's ``yield output_tag, value``
                ctx.output(*side)
                continue
            for value in run_steps(self.steps, to_python(out, self.function_type), ctx):
                if self.output != "none":
                    yield self._row(value)

    def _row(self, value: Any) -> tuple[Any, ...]:
        return sink_row(value, self.output_type, self.output, self._subtask)

    def process_element(self, value: Any, ctx: Any) -> Iterator[tuple[Any, ...]]:
        element = pickle.loads(value.value)
        context = self._context(ctx)
        if self.function is None:
            return self._emit((element,), context)
        return self._emit(self.function.process_element(element, context), context)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[tuple[Any, ...]]:
        if self.function is None:
            return iter(())
        context = self._context(ctx)
        return self._emit(self.function.on_timer(timestamp, context), context)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_contexts", "_routes")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._contexts = {}
        self._routes = {}


class CheckpointedPipelineFunction(PipelineFunction, sc.CheckpointedFunction):
    """The keyed stage of a job whose keyed function has operator state too (the broadcast
    state of ``broadcast``): its ``initialize_state`` and ``snapshot_state`` are the
    function's."""

    def initialize_state(self, context: sc.FunctionInitializationContext) -> None:
        self.function.initialize_state(context)

    def snapshot_state(self, context: sc.FunctionSnapshotContext) -> None:
        self.function.snapshot_state(context)
