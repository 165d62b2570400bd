"""State handles that give values as PyFlink does: a state declared with a ``ROW``, ``TUPLE``,
``MAP`` or ``LIST`` type reads back a :class:`~statecore.pyflink.common.types.Row`, a tuple, a
dict or a list on both backends (statecore's own handles give a struct read back from RocksDB
or a snapshot as a dict and a map as a list of pairs). Only composite types are wrapped: a
state of a primitive or pickled type is statecore's handle itself.

>>> from statecore.pyflink.common import Types
>>> info = Types.ROW_NAMED(["user", "n"], [Types.STRING(), Types.LONG()])
>>> class Stored:  # a value state as RocksDB gives a struct back
...     def value(self): return {"user": "ann", "n": 2}
>>> PyFlinkValueState(Stored(), info).value()
Row(user='ann', n=2)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from statecore.pyflink.common.types import to_python, to_storage

__all__ = [
    "PyFlinkValueState",
    "PyFlinkListState",
    "PyFlinkMapState",
    "PyFlinkReadingState",
    "composite",
]


def composite(type_info: Any) -> bool:
    """Whether values of ``type_info`` need converting on read."""
    return bool(getattr(type_info, "kind", ""))


class _Wrapped:
    __slots__ = ("_state", "_info")

    def __init__(self, state: Any, type_info: Any) -> None:
        self._state = state
        self._info = type_info

    def clear(self) -> None:
        self._state.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)


class PyFlinkValueState(_Wrapped):
    __slots__ = ()

    def value(self) -> Any:
        return to_python(self._state.value(), self._info)

    def update(self, value: Any) -> None:
        self._state.update(to_storage(value))


class PyFlinkReadingState(_Wrapped):
    """A reducing or aggregating state: ``get()`` converted."""

    __slots__ = ()

    def get(self) -> Any:
        return to_python(self._state.get(), self._info)

    def add(self, value: Any) -> None:
        self._state.add(to_storage(value))


class PyFlinkListState(_Wrapped):
    __slots__ = ()

    def get(self) -> Iterable[Any]:
        values = self._state.get()
        return [to_python(v, self._info) for v in values]

    def add(self, value: Any) -> None:
        self._state.add(to_storage(value))

    def add_all(self, values: Iterable[Any]) -> None:
        self._state.add_all([to_storage(v) for v in values])

    def update(self, values: Iterable[Any]) -> None:
        self._state.update([to_storage(v) for v in values])


class PyFlinkMapState(_Wrapped):
    __slots__ = ("_key_info",)

    def __init__(self, state: Any, key_info: Any, value_info: Any) -> None:
        super().__init__(state, value_info)
        self._key_info = key_info

    def get(self, key: Any) -> Any:
        return to_python(self._state.get(to_storage(key)), self._info)

    def put(self, key: Any, value: Any) -> None:
        self._state.put(to_storage(key), to_storage(value))

    def put_all(self, dict_value: Any) -> None:
        self._state.put_all({to_storage(k): to_storage(v) for k, v in dict(dict_value).items()})

    def remove(self, key: Any) -> None:
        self._state.remove(to_storage(key))

    def contains(self, key: Any) -> bool:
        return self._state.contains(to_storage(key))  # type: ignore[no-any-return]

    def items(self) -> Iterator[tuple[Any, Any]]:
        for k, v in self._state.items():
            yield to_python(k, self._key_info), to_python(v, self._info)

    def keys(self) -> Iterator[Any]:
        for k in self._state.keys():  # noqa: SIM118 (a state, not a dict)
            yield to_python(k, self._key_info)

    def values(self) -> Iterator[Any]:
        for v in self._state.values():
            yield to_python(v, self._info)

    def is_empty(self) -> bool:
        return self._state.is_empty()  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[Any]:
        return self.keys()

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)

    def __getitem__(self, key: Any) -> Any:
        return self.get(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value)

    def __delitem__(self, key: Any) -> None:
        self.remove(key)
