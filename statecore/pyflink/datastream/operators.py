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
from statecore.pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from statecore.pyflink.datastream.state import ValueStateDescriptor
from statecore.runtime import functions as sc
from statecore.types import PICKLED

__all__ = ["Step", "Prepare", "PipelineFunction", "Reduce", "KEYED_BY_SEQUENCE"]

KEYED_BY_SEQUENCE = "sequence"
"""The key encoding of a job without ``key_by``: each element its own key (its position)."""

_SEQ_BITS = 40
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


def run_steps(steps: tuple[Step, ...], value: Any) -> Iterator[Any]:
    """``value`` through ``steps``: what comes out at the end (none, one or many)."""
    if not steps:
        yield value
        return
    step, rest = steps[0], steps[1:]
    function = step.call()
    if step.kind == "filter":
        if function(value):
            yield from run_steps(rest, value)
        return
    outputs: Iterable[Any] = function(value) if step.kind == "flat_map" else (function(value),)
    for out in outputs or ():
        yield from run_steps(rest, to_python(out, step.output_type))


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

    def __call__(
        self, records: Iterable[tuple[Any, int | None]], partition: int
    ) -> Iterator[tuple[Any, ...]]:
        return self.rows(records, partition=partition)

    def rows(
        self, records: Iterable[tuple[Any, int | None]], *, partition: int
    ) -> Iterator[tuple[Any, bytes, int | None, int]]:
        """``(key, pickled element, event time, sequence)`` for each element that comes out of
        ``(element, record timestamp)`` records."""
        seq = partition << _SEQ_BITS
        assigner = self.timestamp_assigner
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
                if self.key_selector is None:
                    key = seq
                else:
                    key = encode_key(self.key_selector(value), self.key_encoding)
                yield key, pickle.dumps(value, protocol=5), ts, seq
                seq += 1


MIN_RECORD_TIME = -(1 << 63)
"""The record timestamp an assigner gets for a record without one (Flink's Long.MIN_VALUE)."""


class _PickledKeyContext:
    """statecore's context with the pickled key decoded (a job keyed without a key type)."""

    __slots__ = ("_ctx", "_raw", "_key")

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._raw: Any = None
        self._key: Any = None

    @property
    def current_key(self) -> Any:
        raw = self._ctx.current_key
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

    def output(self, tag: Any, value: Any) -> None:
        self._ctx.output(tag, value)


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
    ) -> None:
        self.function = function
        self.steps = steps
        self.function_type = function_type
        self.output_type = output_type
        self.output = output
        self.pickled_key = pickled_key
        self._contexts: dict[int, Any] = {}
        self._subtask = 0

    def open(self, runtime_context: sc.RuntimeContext) -> None:
        self._subtask = runtime_context.subtask_index
        self._contexts = {}
        if self.function is not None:
            self.function.open(runtime_context)

    def close(self) -> None:
        if self.function is not None:
            self.function.close()

    def _context(self, ctx: Any) -> Any:
        if not self.pickled_key:
            return ctx
        wrapped = self._contexts.get(id(ctx))
        if wrapped is None or wrapped._ctx is not ctx:
            wrapped = self._contexts[id(ctx)] = _PickledKeyContext(ctx)
        return wrapped

    def _emit(self, outputs: Iterable[Any] | None) -> Iterator[tuple[Any, ...]]:
        for out in outputs or ():
            for value in run_steps(self.steps, to_python(out, self.function_type)):
                yield self._row(value)

    def _row(self, value: Any) -> tuple[Any, ...]:
        info = self.output_type
        if self.output == "text":
            return (self._subtask, flink_string(value, info))
        if getattr(info, "kind", "") in ("ROW", "TUPLE"):
            if isinstance(value, dict):
                return tuple(to_storage(value[n]) for n in info.field_names)
            return tuple(to_storage(value))
        return (to_storage(value),)

    def process_element(self, value: Any, ctx: Any) -> Iterator[tuple[Any, ...]]:
        element = pickle.loads(value.value)
        if self.function is None:
            return self._emit((element,))
        return self._emit(self.function.process_element(element, self._context(ctx)))

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[tuple[Any, ...]]:
        if self.function is None:
            return iter(())
        return self._emit(self.function.on_timer(timestamp, self._context(ctx)))

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_contexts"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._contexts = {}
