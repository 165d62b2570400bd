"""A process function over a stream without a key (Flink's ``ProcessFunction`` on a
``DataStream``): :class:`ProcessFunction` and the adapter that runs it in the keyed runtime,
each element its own key (its position), as the PyFlink layer runs ``DataStream.process``.

A non-keyed function has no keyed state and no timers, as in Flink: its context gives the
element's timestamp, the clocks and side outputs; its runtime context which parallel instance it
is. Each subtask processes its elements in their order (the position orders them).

>>> from statecore.testing import KeyedProcessFunctionHarness
>>> class Large(ProcessFunction):
...     def process_element(self, order, ctx):
...         if order[1] >= 100:
...             yield order[0], ctx.timestamp
>>> with KeyedProcessFunctionHarness(NonKeyedFunction(Large()), key=id, key_type=int) as h:
...     h.process_elements([("o1", 20), ("o2", 250)], timestamps=[1000, 2000])
[('o2', 2000)]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from statecore.errors import ConfigError, StateAccessError
from statecore.runtime.functions import Context, KeyedProcessFunction, RuntimeContext
from statecore.runtime.side_outputs import OutputTag

__all__ = [
    "NonKeyedContext",
    "NonKeyedFunction",
    "NonKeyedRuntimeContext",
    "ProcessFunction",
]


class NonKeyedRuntimeContext:
    """What a non-keyed function learns in ``open``: the job, the operator and which parallel
    instance it is; keyed state raises :class:`~statecore.errors.StateAccessError`."""

    __slots__ = ("_context",)

    def __init__(self, context: RuntimeContext) -> None:
        self._context = context

    @property
    def job(self) -> str:
        return self._context.job

    @property
    def operator(self) -> str:
        return self._context.operator

    @property
    def subtask_index(self) -> int:
        return self._context.subtask_index

    @property
    def parallelism(self) -> int:
        return self._context.parallelism

    def _keyed_only(self, *args: Any) -> NoReturn:
        raise StateAccessError(
            f"{self._context.operator}: a ProcessFunction runs on a stream without a key and "
            "has no keyed state; key the stream (keyed_process with a KeyedProcessFunction)"
        )

    get_state = get_list_state = get_map_state = _keyed_only
    get_reducing_state = get_aggregating_state = _keyed_only


class NonKeyedContext:
    """A non-keyed element's context: ``timestamp`` (epoch ms, ``None`` without an event
    time), :meth:`current_watermark`, :meth:`current_processing_time` and ``output(tag,
    value)``; no key and no timers."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    @property
    def timestamp(self) -> int | None:
        return self._ctx.timestamp

    def current_watermark(self) -> int:
        return self._ctx.timer_service.current_watermark()

    def current_processing_time(self) -> int:
        return self._ctx.timer_service.current_processing_time()

    def output(self, tag: OutputTag, value: Any) -> None:
        """Emit ``value`` to the side output ``tag``."""
        self._ctx.output(tag, value)


class ProcessFunction(ABC):
    """A function over a stream without a key; yield output rows from ``process_element``."""

    def open(self, runtime_context: NonKeyedRuntimeContext) -> None:
        """Set up the instance (no keyed state here)."""

    @abstractmethod
    def process_element(self, value: Any, ctx: NonKeyedContext) -> Iterable[Any] | None:
        """Handle one element; yield output rows."""

    def close(self) -> None:
        """Release resources."""


class NonKeyedFunction(KeyedProcessFunction):
    """The adapter: a :class:`ProcessFunction` as the keyed runtime's function of a stream
    keyed by position (each element its own key), with a non-keyed runtime context and
    context."""

    def __init__(
        self, function: ProcessFunction, unpack: Callable[[Any], Any] | None = None
    ) -> None:
        if not isinstance(function, ProcessFunction):
            raise ConfigError(
                f"{type(function).__name__} is not a ProcessFunction (process_element(value, "
                "ctx) over a stream without a key)"
            )
        self.function = function
        self.unpack = unpack
        """The element of a record (``None``: the record itself; on Spark the record's
        columns without its position)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.function.open(NonKeyedRuntimeContext(runtime_context))

    def process_element(self, value: Any, ctx: Context) -> Iterable[Any] | None:
        element = value if self.unpack is None else self.unpack(value)
        return self.function.process_element(element, NonKeyedContext(ctx))

    def close(self) -> None:
        self.function.close()
