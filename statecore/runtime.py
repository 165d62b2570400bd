"""What user code sees: ``KeyedProcessFunction``, its ``RuntimeContext`` and per-record ``Context``.

As in PyFlink, state is declared in ``open()`` from descriptors and used in ``process_element()``,
where the runtime has already made the record's key current:

>>> from statecore.descriptors import ValueStateDescriptor
>>> class RunningTotal(KeyedProcessFunction):
...     def open(self, ctx):
...         self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))
...     def process_element(self, value, ctx):
...         self.total.update(self.total.value() + value.amount)
...         yield ctx.current_key, self.total.value()
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from statecore.backends.base import KeyedStateBackend
from statecore.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from statecore.errors import StateAccessError
from statecore.state import AggregatingState, ListState, MapState, ReducingState, State, ValueState

__all__ = ["RuntimeContext", "Context", "KeyedProcessFunction"]


class RuntimeContext:
    """Where a function gets its keyed state and learns which parallel instance it is."""

    def __init__(
        self,
        backend: KeyedStateBackend,
        *,
        job: str,
        operator: str,
        subtask_index: int,
        parallelism: int,
    ) -> None:
        self.backend = backend
        self.job = job
        self.operator = operator
        self.subtask_index = subtask_index
        self.parallelism = parallelism

    @property
    def max_parallelism(self) -> int:
        return self.backend.max_parallelism

    def _state(self, descriptor: StateDescriptor, expected: type[StateDescriptor]) -> State:
        if not isinstance(descriptor, expected):
            raise StateAccessError(
                f"state {getattr(descriptor, 'name', descriptor)!r}: expected a "
                f"{expected.__name__}, got {type(descriptor).__name__}"
            )
        return self.backend.get_partitioned_state(descriptor)

    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState:
        return self._state(descriptor, ValueStateDescriptor)  # type: ignore[return-value]

    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState:
        return self._state(descriptor, ListStateDescriptor)  # type: ignore[return-value]

    def get_map_state(self, descriptor: MapStateDescriptor) -> MapState:
        return self._state(descriptor, MapStateDescriptor)  # type: ignore[return-value]

    def get_reducing_state(self, descriptor: ReducingStateDescriptor) -> ReducingState:
        return self._state(descriptor, ReducingStateDescriptor)  # type: ignore[return-value]

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState:
        return self._state(descriptor, AggregatingStateDescriptor)  # type: ignore[return-value]


class Context:
    """The per-record context: the current key (set by the runtime, never by user code)."""

    __slots__ = ("_backend",)

    def __init__(self, backend: KeyedStateBackend) -> None:
        self._backend = backend

    @property
    def current_key(self) -> Any:
        return self._backend.current_key


class KeyedProcessFunction(ABC):
    """A function over a keyed stream with access to keyed state (Flink's KeyedProcessFunction)."""

    def open(self, runtime_context: RuntimeContext) -> None:  # noqa: B027 (optional hook)
        """Declare state here."""

    @abstractmethod
    def process_element(self, value: Any, ctx: Context) -> Iterable[Any] | None:
        """Handle one record of the current key; yield output rows (tuples)."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release resources."""
