"""What a window emits: the user's :class:`ProcessWindowFunction` or :class:`WindowFunction`
over a window's inputs, and the :class:`WindowContents` that keep those inputs in keyed state.

A window's contents are one keyed state in the window's namespace (state ``window_contents``):
the elements in list state (for ``process`` and ``apply``, and whenever an evictor is set), or
one value reduced or aggregated incrementally as elements arrive (``reduce``, ``aggregate``),
which the window function then gets as its only input.

>>> class Count(ProcessWindowFunction):
...     def process(self, key, context, elements):
...         yield key, context.window.start, len(list(elements))
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from statecore.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
)
from statecore.runtime.functions import RuntimeContext
from statecore.runtime.windows.windows import Window
from statecore.state import VOID_NAMESPACE, State
from statecore.types import Pickled, TypeSpec, arrow_type

__all__ = [
    "ProcessWindowFunction",
    "WindowFunction",
    "WindowProcessContext",
    "WindowStateStore",
    "WindowContents",
    "ListContents",
    "ReducingContents",
    "AggregatingContents",
    "evicting_descriptor",
    "CONTENTS",
]

CONTENTS = "window_contents"
"""The name of the keyed state holding each window's contents."""


class WindowStateStore:
    """Keyed state of the current key, scoped to one namespace (a window's, or the void one
    for state shared by all windows of the key)."""

    def __init__(self, runtime_context: RuntimeContext, namespace: str) -> None:
        self._runtime_context = runtime_context
        self.namespace = namespace

    def _scoped(self, state: State) -> Any:
        state.set_current_namespace(self.namespace)
        return state

    def get_state(self, descriptor: Any) -> Any:
        return self._scoped(self._runtime_context.get_state(descriptor))

    def get_list_state(self, descriptor: Any) -> Any:
        return self._scoped(self._runtime_context.get_list_state(descriptor))

    def get_map_state(self, descriptor: Any) -> Any:
        return self._scoped(self._runtime_context.get_map_state(descriptor))

    def get_reducing_state(self, descriptor: Any) -> Any:
        return self._scoped(self._runtime_context.get_reducing_state(descriptor))

    def get_aggregating_state(self, descriptor: Any) -> Any:
        return self._scoped(self._runtime_context.get_aggregating_state(descriptor))


class WindowProcessContext:
    """What a :class:`ProcessWindowFunction` gets beside its inputs: the window, the clocks,
    per-window state (``window_state``, cleared with the window) and per-key state
    (``global_state``), and ``output(tag, value)`` for side outputs."""

    def __init__(
        self, runtime_context: RuntimeContext, window: Window, record_context: Any
    ) -> None:
        self.window = window
        self._runtime_context = runtime_context
        self._record_context = record_context

    @property
    def current_watermark(self) -> int:
        return self._runtime_context.backend.timer_service.current_watermark()

    @property
    def current_processing_time(self) -> int:
        return self._runtime_context.backend.timer_service.current_processing_time()

    @property
    def window_state(self) -> WindowStateStore:
        return WindowStateStore(self._runtime_context, self.window.namespace)

    @property
    def global_state(self) -> WindowStateStore:
        return WindowStateStore(self._runtime_context, VOID_NAMESPACE)

    def output(self, tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output ``tag``."""
        self._record_context.output(tag, value)


class ProcessWindowFunction(ABC):
    """A function over a window's inputs with its context (Flink's ``ProcessWindowFunction``)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        """Declare state here (with ``context.window_state`` per window, in ``process``)."""

    @abstractmethod
    def process(
        self, key: Any, context: WindowProcessContext, elements: Iterable[Any]
    ) -> Iterable[Any] | None:
        """The window fired: yield its output for ``key``."""

    def clear(self, context: WindowProcessContext) -> None:
        """The window is cleaned up: clear what ``process`` kept in ``context.window_state``."""

    def close(self) -> None:
        """Release resources."""


class WindowFunction(ABC):
    """A function over a window's inputs (Flink's older ``WindowFunction``)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        """Declare state here."""

    @abstractmethod
    def apply(self, key: Any, window: Window, inputs: Iterable[Any]) -> Iterable[Any] | None:
        """The window fired: yield its output for ``key``."""

    def close(self) -> None:
        """Release resources."""


class WindowContents(ABC):
    """How a window keeps what its function gets: a keyed state descriptor, how an element is
    added, and what the function's inputs are (``fold``, over the elements an evictor left)."""

    @property
    @abstractmethod
    def descriptor(self) -> StateDescriptor: ...

    @abstractmethod
    def inputs(self, state: Any) -> list[Any] | None:
        """The function's inputs from the window's state (``None``: the window is empty)."""

    @abstractmethod
    def fold(self, values: list[Any]) -> list[Any]:
        """The function's inputs from the elements kept (in list state, with an evictor)."""

    @property
    @abstractmethod
    def element_type(self) -> TypeSpec:
        """The elements' type (what an evicting window stores)."""


class ListContents(WindowContents):
    """Every element, in list state (``process`` and ``apply``)."""

    def __init__(self, element_type: TypeSpec) -> None:
        self._type = element_type
        self._descriptor = ListStateDescriptor(CONTENTS, element_type)

    @property
    def descriptor(self) -> StateDescriptor:
        return self._descriptor

    @property
    def element_type(self) -> TypeSpec:
        return self._type

    def inputs(self, state: Any) -> list[Any] | None:
        return state.get() or None

    def fold(self, values: list[Any]) -> list[Any]:
        return values


class ReducingContents(WindowContents):
    """One value, each element reduced into it as it arrives (``reduce``)."""

    def __init__(self, reduce: Callable[[Any, Any], Any], element_type: TypeSpec) -> None:
        self._reduce = reduce
        self._type = element_type
        self._descriptor = ReducingStateDescriptor(CONTENTS, reduce, element_type)

    @property
    def descriptor(self) -> StateDescriptor:
        return self._descriptor

    @property
    def element_type(self) -> TypeSpec:
        return self._type

    def inputs(self, state: Any) -> list[Any] | None:
        value = state.get()
        return None if value is None else [value]

    def fold(self, values: list[Any]) -> list[Any]:
        return [functools.reduce(self._reduce, values)] if values else []


class AggregatingContents(WindowContents):
    """An accumulator, each element added as it arrives; the function gets its result
    (``aggregate``)."""

    def __init__(
        self,
        aggregate: AggregateFunction[Any, Any, Any],
        accumulator_type: TypeSpec,
        element_type: TypeSpec,
    ) -> None:
        self._aggregate = aggregate
        self._type = element_type
        self._descriptor = AggregatingStateDescriptor(CONTENTS, aggregate, accumulator_type)

    @property
    def descriptor(self) -> StateDescriptor:
        return self._descriptor

    @property
    def element_type(self) -> TypeSpec:
        return self._type

    def inputs(self, state: Any) -> list[Any] | None:
        value = state.get()
        return None if value is None else [value]

    def fold(self, values: list[Any]) -> list[Any]:
        if not values:
            return []
        aggregate = self._aggregate
        accumulator = aggregate.create_accumulator()
        for value in values:
            accumulator = aggregate.add(value, accumulator)
        return [aggregate.get_result(accumulator)]


def evicting_descriptor(element_type: TypeSpec) -> ListStateDescriptor:
    """The list state of an evicting window: each element with its timestamp, as a
    ``{"value", "timestamp"}`` struct (pickled whole when the elements are pickled)."""
    if isinstance(element_type, Pickled):
        return ListStateDescriptor(CONTENTS, element_type)
    struct = pa.struct([("value", arrow_type(element_type)), ("timestamp", pa.int64())])
    return ListStateDescriptor(CONTENTS, struct)
