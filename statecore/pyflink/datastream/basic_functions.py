"""PyFlink's plain user functions (``pyflink.datastream.functions``): the ``Function`` base
with ``open`` and ``close``, and the one-method functions of ``map``, ``flat_map``, ``filter``,
``key_by``, ``reduce`` and ``aggregate``. :mod:`statecore.pyflink.datastream.functions`
exports them beside the process, co- and window functions."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from statecore.descriptors import AggregateFunction as _AggregateFunction

__all__ = [
    "Function",
    "MapFunction",
    "FlatMapFunction",
    "FilterFunction",
    "KeySelector",
    "ReduceFunction",
    "AggregateFunction",
]


class Function:
    """PyFlink's base of user functions: ``open`` and ``close``."""

    def open(self, runtime_context: Any) -> None:
        pass

    def close(self) -> None:
        pass


class MapFunction(Function, ABC):
    """PyFlink's ``MapFunction``: one element in, one out."""

    @abstractmethod
    def map(self, value: Any) -> Any: ...


class FlatMapFunction(Function, ABC):
    """PyFlink's ``FlatMapFunction``: one element in, any number out (yield them)."""

    @abstractmethod
    def flat_map(self, value: Any) -> Iterable[Any]: ...


class FilterFunction(Function, ABC):
    """PyFlink's ``FilterFunction``: whether the element stays."""

    @abstractmethod
    def filter(self, value: Any) -> bool: ...


class KeySelector(Function, ABC):
    """PyFlink's ``KeySelector``: an element's key."""

    @abstractmethod
    def get_key(self, value: Any) -> Any: ...


class ReduceFunction(Function, ABC):
    """PyFlink's ``ReduceFunction``: combines two values into one."""

    @abstractmethod
    def reduce(self, value1: Any, value2: Any) -> Any: ...


class AggregateFunction(Function, _AggregateFunction[Any, Any, Any]):
    """PyFlink's ``AggregateFunction`` (``create_accumulator``, ``add``, ``get_result``,
    ``merge``): statecore's, with ``open`` and ``close``."""
