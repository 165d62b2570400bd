"""How reducing and aggregating state accumulate, independent of where the accumulator lives.

Both kinds keep one stored accumulator per key and namespace: ``add`` folds a value into it and
``merge_namespaces`` merges accumulators (Flink's ``AbstractHeapMergingState`` with its
``mergeState``). A :class:`Accumulation` is that logic once; each backend has one merging state
class that stores the accumulator its own way and asks the accumulation what to store.

>>> from statecore.descriptors import ReducingStateDescriptor
>>> sums = accumulation_for(ReducingStateDescriptor("total", lambda a, b: a + b, int))
>>> accumulator = sums.add(NO_ACCUMULATOR, 5)
>>> sums.result(sums.merge(sums.add(accumulator, 2), 10))
17
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from statecore.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
)
from statecore.errors import StateAccessError
from statecore.types import TypeInfo

__all__ = ["NO_ACCUMULATOR", "Accumulation", "Reduction", "Aggregation", "accumulation_for"]

NO_ACCUMULATOR: Any = object()
"""The accumulator of a key and namespace that has none yet."""


class Accumulation(ABC):
    """The accumulator of one reducing or aggregating state: checked input, add, merge, result."""

    what = "value"
    """What the stored accumulator is called in error messages."""

    def __init__(self, state: str) -> None:
        self.state = state

    def check(self, value: Any) -> None:
        """Refuse a value ``add`` must not take (``None`` at least)."""
        if value is None:
            raise StateAccessError(f"state {self.state!r}: cannot add None")

    @abstractmethod
    def add(self, accumulator: Any, value: Any) -> Any:
        """The accumulator after adding ``value`` (:data:`NO_ACCUMULATOR` when there is none)."""

    @abstractmethod
    def merge(self, a: Any, b: Any) -> Any:
        """Two accumulators (of two namespaces) as one."""

    def result(self, accumulator: Any) -> Any:
        """What ``get`` returns for a stored accumulator."""
        return accumulator


class Reduction(Accumulation):
    """``ReducingState``: the accumulator is the reduced value itself."""

    def __init__(self, state: str, reduce: Callable[[Any, Any], Any], info: TypeInfo) -> None:
        super().__init__(state)
        self.reduce = reduce
        self.info = info

    def check(self, value: Any) -> None:
        self.info.check(value, state=self.state, what="value")

    def add(self, accumulator: Any, value: Any) -> Any:
        return value if accumulator is NO_ACCUMULATOR else self.reduce(accumulator, value)

    def merge(self, a: Any, b: Any) -> Any:
        return self.reduce(a, b)


class Aggregation(Accumulation):
    """``AggregatingState``: an :class:`~statecore.descriptors.AggregateFunction`'s accumulator."""

    what = "accumulator"

    def __init__(self, state: str, function: AggregateFunction[Any, Any, Any]) -> None:
        super().__init__(state)
        self.function = function

    def add(self, accumulator: Any, value: Any) -> Any:
        function = self.function
        if accumulator is NO_ACCUMULATOR:
            accumulator = function.create_accumulator()
        return function.add(value, accumulator)

    def merge(self, a: Any, b: Any) -> Any:
        return self.function.merge(a, b)

    def result(self, accumulator: Any) -> Any:
        return self.function.get_result(accumulator)


def accumulation_for(descriptor: StateDescriptor) -> Accumulation:
    """The accumulation of a reducing or aggregating state's descriptor."""
    if isinstance(descriptor, ReducingStateDescriptor):
        return Reduction(descriptor.name, descriptor.reduce_function, descriptor.value_info)
    if isinstance(descriptor, AggregatingStateDescriptor):
        return Aggregation(descriptor.name, descriptor.aggregate_function)
    raise TypeError(f"state {descriptor.name!r} of kind {descriptor.kind.value} does not merge")
