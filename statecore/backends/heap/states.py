"""Heap implementations of the five keyed state kinds.

A state's values live in ``table[namespace][key_group][key]``, so a per-record access is two dict
look-ups with no allocation, and a snapshot or restore touches one key group at a time (Flink's
``StateTable`` keeps one map per key group for the same reason).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NoReturn

from statecore.backends.context import KeyContextOwner
from statecore.backends.merging import NO_ACCUMULATOR, accumulation_for
from statecore.descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from statecore.errors import StateAccessError
from statecore.state import (
    VOID_NAMESPACE,
    AggregatingState,
    ListState,
    MapState,
    MergingState,
    ReducingState,
    ValueState,
)
from statecore.types import TypeInfo

__all__ = [
    "StateTable",
    "HeapValueState",
    "HeapListState",
    "HeapMapState",
    "HeapReducingState",
    "HeapAggregatingState",
]

_MISSING: Any = object()


class StateTable:
    """All values of one state: ``namespaces[namespace][key_group][key] -> value``."""

    __slots__ = ("descriptor", "namespaces", "dirty")

    def __init__(self, descriptor: StateDescriptor, dirty: set[int] | None = None) -> None:
        self.descriptor = descriptor
        self.namespaces: dict[str, dict[int, dict[Any, Any]]] = {}
        self.dirty: set[int] = set() if dirty is None else dirty


class _HeapState:
    """The current key's map for this state and namespace, fetched per access from the
    backend's :class:`~statecore.backends.context.KeyContext`."""

    __slots__ = ("_current", "_table", "_name", "_by_kg")

    def __init__(self, backend: KeyContextOwner, table: StateTable) -> None:
        self._current = backend.key_context
        self._table = table
        self._name = table.descriptor.name
        self._by_kg = table.namespaces.setdefault(VOID_NAMESPACE, {})

    def set_current_namespace(self, namespace: str) -> None:
        if not isinstance(namespace, str):
            raise StateAccessError(
                f"state {self._name!r}: namespace must be a str, got {type(namespace).__name__}"
            )
        self._by_kg = self._table.namespaces.setdefault(namespace, {})

    def _no_key(self) -> NoReturn:
        raise StateAccessError(
            f"state {self._name!r} used outside a keyed context (no current key)"
        )

    def _read_map(self) -> dict[Any, Any] | None:
        kg = self._current.key_group
        if kg is None:
            self._no_key()
        return self._by_kg.get(kg)

    def _write_map(self) -> dict[Any, Any]:
        kg = self._current.key_group
        if kg is None:
            self._no_key()
        self._table.dirty.add(kg)
        m = self._by_kg.get(kg)
        if m is None:
            m = self._by_kg[kg] = {}
        return m

    def _check(self, info: TypeInfo, value: Any, what: str = "value") -> None:
        info.check(value, state=self._name, what=what)

    def clear(self) -> None:
        current = self._current
        kg = current.key_group
        if kg is None:
            self._no_key()
        m = self._by_kg.get(kg)
        if m is not None and current.key in m:
            del m[current.key]
            self._table.dirty.add(kg)

    def _merge_namespaces(
        self, target: str, sources: Iterable[str], merge: Callable[[Any, Any], Any]
    ) -> None:
        """Flink's ``AbstractHeapMergingState.mergeNamespaces`` over stored values."""
        current = self._current
        kg = current.key_group
        if kg is None:
            self._no_key()
        key = current.key
        namespaces = self._table.namespaces
        merged = _MISSING
        for source in sources:
            m = namespaces.get(source, {}).get(kg)
            if m is None or key not in m:
                continue
            value = m.pop(key)
            self._table.dirty.add(kg)
            merged = value if merged is _MISSING else merge(merged, value)
        if merged is not _MISSING:
            m = namespaces.setdefault(target, {}).setdefault(kg, {})
            existing = m.get(key, _MISSING)
            m[key] = merged if existing is _MISSING else merge(existing, merged)
            self._table.dirty.add(kg)


class HeapValueState(_HeapState, ValueState):
    __slots__ = ("_default", "_fresh_default", "_info", "_accepted", "_dirty")

    def __init__(self, backend: KeyContextOwner, table: StateTable) -> None:
        super().__init__(backend, table)
        descriptor = table.descriptor
        assert isinstance(descriptor, ValueStateDescriptor)
        self._default = descriptor.default
        self._fresh_default = descriptor.default_factory  # None: the default is immutable
        self._info = descriptor.value_info
        self._accepted = self._info.accepted or ()
        self._dirty = table.dirty

    def value(self) -> Any:
        # The per-record path: inlined look-ups, no allocation (stored values are never None).
        current = self._current
        kg = current.key_group
        if kg is None:
            self._no_key()
        m = self._by_kg.get(kg)
        value = self._default if m is None else m.get(current.key, self._default)
        if value is self._default and self._fresh_default is not None:
            return self._fresh_default()
        return value

    def update(self, value: Any) -> None:
        if value.__class__ not in self._accepted:
            if value is None:
                self.clear()
                return
            self._check(self._info, value)
        current = self._current
        kg = current.key_group
        if kg is None:
            self._no_key()
        self._dirty.add(kg)
        m = self._by_kg.get(kg)
        if m is None:
            m = self._by_kg[kg] = {}
        m[current.key] = value


class HeapListState(_HeapState, ListState):
    __slots__ = ("_info",)

    def __init__(self, backend: KeyContextOwner, table: StateTable) -> None:
        super().__init__(backend, table)
        descriptor = table.descriptor
        assert isinstance(descriptor, ListStateDescriptor)
        self._info = descriptor.element_info

    def get(self) -> list[Any]:
        m = self._read_map()
        if m is None:
            return []
        return list(m.get(self._current.key, ()))

    def add(self, value: Any) -> None:
        self._check(self._info, value, "list element")
        m = self._write_map()
        current = m.get(self._current.key)
        if current is None:
            m[self._current.key] = [value]
        else:
            current.append(value)

    def _checked(self, values: Iterable[Any]) -> list[Any]:
        if values is None:
            raise StateAccessError(f"state {self._name!r}: the list of values must not be None")
        values = list(values)
        for v in values:
            self._check(self._info, v, "list element")
        return values

    def add_all(self, values: Iterable[Any]) -> None:
        values = self._checked(values)
        if values:
            m = self._write_map()
            current = m.get(self._current.key)
            if current is None:
                m[self._current.key] = values
            else:
                current.extend(values)

    def update(self, values: Iterable[Any]) -> None:
        values = self._checked(values)
        if values:
            self._write_map()[self._current.key] = values
        else:
            self.clear()

    def merge_namespaces(self, target: str, sources: Iterable[str]) -> None:
        self._merge_namespaces(target, sources, lambda a, b: a + b)


class HeapMapState(_HeapState, MapState):
    __slots__ = ("_key_info", "_info")

    def __init__(self, backend: KeyContextOwner, table: StateTable) -> None:
        super().__init__(backend, table)
        descriptor = table.descriptor
        assert isinstance(descriptor, MapStateDescriptor)
        self._key_info = descriptor.user_key_info
        self._info = descriptor.value_info

    def _entries(self) -> dict[Any, Any] | None:
        m = self._read_map()
        return None if m is None else m.get(self._current.key)

    def get(self, key: Any) -> Any:
        entries = self._entries()
        return None if entries is None else entries.get(key)

    def put(self, key: Any, value: Any) -> None:
        self._check(self._key_info, key, "map key")
        if value is not None:
            self._check(self._info, value, "map value")
        m = self._write_map()
        entries = m.get(self._current.key)
        if entries is None:
            m[self._current.key] = {key: value}
        else:
            entries[key] = value

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        for k, v in entries.items():
            self.put(k, v)

    def remove(self, key: Any) -> None:
        entries = self._entries()
        if entries is not None and key in entries:
            del entries[key]
            m = self._write_map()
            if not entries:
                del m[self._current.key]

    def contains(self, key: Any) -> bool:
        entries = self._entries()
        return entries is not None and key in entries

    def items(self) -> Iterator[tuple[Any, Any]]:
        entries = self._entries()
        return iter(list(entries.items())) if entries else iter(())

    def is_empty(self) -> bool:
        return not self._entries()

    def __len__(self) -> int:
        entries = self._entries()
        return len(entries) if entries else 0


class _HeapMergingState(_HeapState, MergingState):
    """Reducing and aggregating state: one accumulator per key and namespace, kept as is
    (what is added and merged is the descriptor's :class:`~statecore.backends.merging.Accumulation`;
    Flink's ``AbstractHeapMergingState``)."""

    __slots__ = ("_accumulation",)

    def __init__(self, backend: KeyContextOwner, table: StateTable) -> None:
        super().__init__(backend, table)
        self._accumulation = accumulation_for(table.descriptor)

    def get(self) -> Any:
        m = self._read_map()
        if m is None:
            return None
        accumulator = m.get(self._current.key, NO_ACCUMULATOR)
        return None if accumulator is NO_ACCUMULATOR else self._accumulation.result(accumulator)

    def add(self, value: Any) -> None:
        accumulation = self._accumulation
        accumulation.check(value)
        m = self._write_map()
        key = self._current.key
        m[key] = accumulation.add(m.get(key, NO_ACCUMULATOR), value)

    def merge_namespaces(self, target: str, sources: Iterable[str]) -> None:
        self._merge_namespaces(target, sources, self._accumulation.merge)


class HeapReducingState(_HeapMergingState, ReducingState):
    __slots__ = ()

    pass


class HeapAggregatingState(_HeapMergingState, AggregatingState):
    __slots__ = ()

    pass
