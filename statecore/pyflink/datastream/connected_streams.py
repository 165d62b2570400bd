"""PyFlink's ``ConnectedStreams`` (``DataStream.connect``): two streams into one two-input
function, run as statecore's two-input runtime (:mod:`statecore.runtime.co_process`): one keyed
input whose elements carry the input they came from.

- ``connect`` of two keyed streams, or ``connect(...).key_by(key_selector1, key_selector2)``:
  ``process(KeyedCoProcessFunction)``, ``map(CoMapFunction)``, ``flat_map(CoFlatMapFunction)``,
  with the key's state and timers shared by both inputs.
- ``connect`` of two streams that are not keyed: ``map``, ``flat_map`` and
  ``process(CoProcessFunction)``, without keyed state or timers (a call to either raises
  :class:`~statecore.errors.PyFlinkUnsupportedError` naming ``key_by``).

The job's plan (:class:`~statecore.pyflink.datastream.data_stream.Plan`) then has two inputs,
each with its source, its steps before the connect, its timestamps and its key selector; the
steps after the function run in the same task, as for one input.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.pyflink.datastream.functions import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
    RuntimeContext,
)
from statecore.runtime import functions as sc
from statecore.runtime.co_process import KeyedCoProcessFunction as RuntimeCoProcessFunction
from statecore.runtime.co_process import two_input_function

__all__ = ["ConnectedStreams", "two_input_plan"]


def _unsupported(what: str, instead: str) -> PyFlinkUnsupportedError:
    return PyFlinkUnsupportedError(f"{what}: {instead} ({COMING_FROM_PYFLINK})")


_KEY_BOTH = "key both inputs (connect(...).key_by(key_selector1, key_selector2))"


class NonKeyedRuntimeContext(RuntimeContext):
    """The runtime context of a function over connected streams that are not keyed: the
    subtask's getters; keyed state raises."""

    __slots__ = ()

    def _keyed(self, *args: Any) -> Any:
        raise _unsupported(
            "keyed state in a function over connected streams that are not keyed",
            f"{_KEY_BOTH} and use a KeyedCoProcessFunction",
        )

    get_state = _keyed  # type: ignore[assignment]
    get_list_state = _keyed  # type: ignore[assignment]
    get_map_state = _keyed  # type: ignore[assignment]
    get_reducing_state = _keyed  # type: ignore[assignment]
    get_aggregating_state = _keyed  # type: ignore[assignment]


class NonKeyedContext:
    """``CoProcessFunction.Context``: the element's timestamp; no key and no timers."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def timestamp(self) -> int | None:
        return self._ctx.timestamp  # type: ignore[no-any-return]

    def timer_service(self) -> Any:
        raise _unsupported(
            "timers in a CoProcessFunction (Flink: only on keyed streams)",
            f"{_KEY_BOTH} and use a KeyedCoProcessFunction",
        )

    def get_current_key(self) -> Any:
        raise _unsupported("get_current_key() on streams that are not keyed", _KEY_BOTH)


class CoMapRunner(RuntimeCoProcessFunction):
    """A ``CoMapFunction`` or ``CoFlatMapFunction`` as a two-input function (with keyed state
    when the inputs are keyed, as Flink's rich co-map functions have)."""

    def __init__(self, function: Any, *, keyed: bool) -> None:
        self.function = function
        self.keyed = keyed
        self.flat = isinstance(function, CoFlatMapFunction)

    def open(self, runtime_context: sc.RuntimeContext) -> None:
        kind = RuntimeContext if self.keyed else NonKeyedRuntimeContext
        open_ = getattr(self.function, "open", None)
        if open_ is not None:
            open_(kind(runtime_context))

    def _call(self, name: str, value: Any) -> Iterable[Any]:
        result = getattr(self.function, name)(value)
        return (result or ()) if self.flat else (result,)

    def process_element1(self, value: Any, ctx: sc.Context) -> Iterable[Any]:
        return self._call("flat_map1" if self.flat else "map1", value)

    def process_element2(self, value: Any, ctx: sc.Context) -> Iterable[Any]:
        return self._call("flat_map2" if self.flat else "map2", value)

    def close(self) -> None:
        close = getattr(self.function, "close", None)
        if close is not None:
            close()


class CoProcessRunner(RuntimeCoProcessFunction):
    """A ``CoProcessFunction`` (streams not keyed) as a two-input function."""

    def __init__(self, function: CoProcessFunction) -> None:
        self.function = function

    def open(self, runtime_context: sc.RuntimeContext) -> None:
        self.function.open(NonKeyedRuntimeContext(runtime_context))

    def process_element1(self, value: Any, ctx: sc.Context) -> Iterable[Any] | None:
        return self.function.process_element1(value, NonKeyedContext(ctx))

    def process_element2(self, value: Any, ctx: sc.Context) -> Iterable[Any] | None:
        return self.function.process_element2(value, NonKeyedContext(ctx))

    def close(self) -> None:
        self.function.close()


def two_input_plan(first: Any, second: Any, function: Any, output_type: Any) -> Any:
    """The plan of a job whose keyed stage runs ``function`` over the plans ``first`` and
    ``second`` (each with its source, steps, timestamps and key selector), its elements tagged
    with their input."""
    return dataclasses.replace(
        first,
        source=None,
        source_type=None,
        source_name=None,
        before=(),
        watermarks=None,
        inputs=(first, second),
        tagged=True,
        function=function,
        function_type=output_type,
        element_type=output_type,
        after=(),
        keyed=True,
    )


class ConnectedStreams:
    """Two streams connected (``first.connect(second)``): ``key_by``, then ``process``,
    ``map`` or ``flat_map`` with a two-input function."""

    def __init__(self, first: Any, second: Any) -> None:
        for stream in (first, second):
            if stream._plan.keyed:
                raise _unsupported(
                    "connect after a keyed function",
                    "connect the streams before their keyed functions; statecore runs one "
                    "keyed operator per job",
                )
        self.first_stream = first
        self.second_stream = second

    @property
    def _plans(self) -> tuple[Any, Any]:
        return self.first_stream._plan, self.second_stream._plan

    @property
    def _keyed(self) -> bool:
        first, second = self._plans
        if (first.key_selector is None) != (second.key_selector is None):
            raise _unsupported("connect of a keyed stream and a stream that is not", _KEY_BOTH)
        return first.key_selector is not None

    def key_by(
        self, key_selector1: Any, key_selector2: Any, key_type: Any = None
    ) -> ConnectedStreams:
        """Key each input by its selector (Flink's ``connect(...).key_by(k1, k2)``): the keys
        of both must be of one type."""
        streams = []
        for stream, selector in zip(
            (self.first_stream, self.second_stream), (key_selector1, key_selector2)
        ):
            streams.append(stream.key_by(selector, key_type))
        return ConnectedStreams(*streams)

    def _run(self, function: RuntimeCoProcessFunction, output_type: Any) -> Any:
        first, second = self._plans
        if (
            first.key_type is not None
            and second.key_type is not None
            and first.key_type != second.key_type
        ):
            raise _unsupported(
                f"connect of streams keyed by {first.key_type} and {second.key_type}",
                "key both inputs with one key type",
            )
        key_type = first.key_type if first.key_type is not None else second.key_type
        plan = two_input_plan(first, second, two_input_function(function), output_type)
        return self.first_stream._with(dataclasses.replace(plan, key_type=key_type))

    def process(self, func: Any, output_type: Any = None) -> Any:
        """A ``KeyedCoProcessFunction`` over keyed inputs, a ``CoProcessFunction`` over inputs
        that are not keyed."""
        if isinstance(func, KeyedCoProcessFunction):
            if not self._keyed:
                raise _unsupported(
                    "a KeyedCoProcessFunction on streams that are not keyed", _KEY_BOTH
                )
            return self._run(func, output_type)
        if isinstance(func, CoProcessFunction):
            if self._keyed:
                raise _unsupported(
                    "a CoProcessFunction on keyed streams",
                    "use a KeyedCoProcessFunction (from statecore.pyflink.datastream import "
                    "KeyedCoProcessFunction)",
                )
            return self._run(CoProcessRunner(func), output_type)
        raise _unsupported(
            f"ConnectedStreams.process({type(func).__name__})",
            "statecore runs a KeyedCoProcessFunction or a CoProcessFunction",
        )

    def map(self, func: Any, output_type: Any = None) -> Any:
        if not isinstance(func, CoMapFunction):
            raise _unsupported(
                f"ConnectedStreams.map({type(func).__name__})", "give it a CoMapFunction"
            )
        return self._run(CoMapRunner(func, keyed=self._keyed), output_type)

    def flat_map(self, func: Any, output_type: Any = None) -> Any:
        if not isinstance(func, CoFlatMapFunction):
            raise _unsupported(
                f"ConnectedStreams.flat_map({type(func).__name__})", "give it a CoFlatMapFunction"
            )
        return self._run(CoMapRunner(func, keyed=self._keyed), output_type)
