"""The user-facing keyed state interfaces, scoped to the current key and namespace.

The runtime sets the current key before each record; user code never passes it. Each state is
also scoped by a namespace (the void namespace ``""`` unless ``set_current_namespace`` chose
another, as windows do). List, reducing and aggregating states are :class:`MergingState` s:
they can merge namespaces into one (Flink's ``InternalMergingState``, what merging windows use).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = [
    "VOID_NAMESPACE",
    "State",
    "ValueState",
    "ListState",
    "MapState",
    "MergingState",
    "ReducingState",
    "AggregatingState",
]

VOID_NAMESPACE = ""


class State(ABC):
    """Every keyed state can be cleared and re-scoped to a namespace."""

    __slots__ = ()

    @abstractmethod
    def clear(self) -> None:
        """Remove the value for the current key and namespace."""

    @abstractmethod
    def set_current_namespace(self, namespace: str) -> None:
        """Scope later calls to ``namespace`` (the void namespace is ``""``)."""


class MergingState(State):
    """A state whose values in several namespaces of one key merge into one value: elements
    appended (list), reduced (reducing) or accumulators merged (aggregating)."""

    __slots__ = ()

    @abstractmethod
    def merge_namespaces(self, target: str, sources: Iterable[str]) -> None:
        """Merge the current key's values in ``sources`` into ``target``, clearing ``sources``."""


class ValueState(State):
    __slots__ = ()

    @abstractmethod
    def value(self) -> Any:
        """The value, or the descriptor's default when there is none."""

    @abstractmethod
    def update(self, value: Any) -> None:
        """Set the value; ``None`` clears it, as in Flink."""


class ListState(MergingState):
    __slots__ = ()

    @abstractmethod
    def get(self) -> list[Any]:
        """A copy of the elements (empty when there are none)."""

    @abstractmethod
    def add(self, value: Any) -> None:
        """Append one element; ``None`` is an error."""

    @abstractmethod
    def add_all(self, values: Iterable[Any]) -> None: ...

    @abstractmethod
    def update(self, values: Iterable[Any]) -> None:
        """Replace the elements; an empty iterable clears the list."""


class MapState(State):
    __slots__ = ()

    @abstractmethod
    def get(self, key: Any) -> Any:
        """The value under ``key``, or ``None``."""

    @abstractmethod
    def put(self, key: Any, value: Any) -> None: ...

    @abstractmethod
    def put_all(self, entries: Mapping[Any, Any]) -> None: ...

    @abstractmethod
    def remove(self, key: Any) -> None: ...

    @abstractmethod
    def contains(self, key: Any) -> bool: ...

    @abstractmethod
    def items(self) -> Iterator[tuple[Any, Any]]: ...

    def keys(self) -> Iterator[Any]:
        return (k for k, _ in self.items())

    def values(self) -> Iterator[Any]:
        return (v for _, v in self.items())

    def is_empty(self) -> bool:
        return next(iter(self.items()), None) is None

    def __getitem__(self, key: Any) -> Any:
        if not self.contains(key):
            raise KeyError(key)
        return self.get(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value)

    def __delitem__(self, key: Any) -> None:
        if not self.contains(key):
            raise KeyError(key)
        self.remove(key)

    def __contains__(self, key: object) -> bool:
        return self.contains(key)

    def __iter__(self) -> Iterator[Any]:
        return self.keys()

    def __len__(self) -> int:
        return sum(1 for _ in self.items())


class ReducingState(MergingState):
    __slots__ = ()

    @abstractmethod
    def get(self) -> Any:
        """The reduced value, or ``None``."""

    @abstractmethod
    def add(self, value: Any) -> None:
        """Reduce ``value`` into the state with the descriptor's reduce function."""


class AggregatingState(MergingState):
    __slots__ = ()

    @abstractmethod
    def get(self) -> Any:
        """``get_result`` of the accumulator, or ``None`` when nothing was added."""

    @abstractmethod
    def add(self, value: Any) -> None:
        """Add ``value`` to the accumulator with the descriptor's aggregate function."""
