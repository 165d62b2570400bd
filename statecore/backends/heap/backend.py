"""``HeapKeyedStateBackend``: keyed state as Python objects, snapshotted per key group."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

import pyarrow as pa

from statecore.backends.base import KeyedStateBackend, Purge, snapshot_schema
from statecore.backends.changes import mark_changed
from statecore.backends.heap.states import (
    HeapAggregatingState,
    HeapListState,
    HeapMapState,
    HeapReducingState,
    HeapValueState,
    StateTable,
)
from statecore.descriptors import StateDescriptor, StateKind
from statecore.errors import CorruptSnapshotError
from statecore.state import VOID_NAMESPACE, State

__all__ = ["HeapKeyedStateBackend"]

_STATE_CLASSES: dict[StateKind, Callable[[HeapKeyedStateBackend, StateTable], State]] = {
    StateKind.VALUE: HeapValueState,
    StateKind.LIST: HeapListState,
    StateKind.MAP: HeapMapState,
    StateKind.REDUCING: HeapReducingState,
    StateKind.AGGREGATING: HeapAggregatingState,
}


class _CleanupCursor:
    """Where incremental TTL cleanup of one state resumes: the keys left in the current
    (namespace, key group) map, then the maps not visited yet in this round."""

    __slots__ = ("maps", "key_group", "by_key", "keys")

    def __init__(self, table: StateTable) -> None:
        self.maps = iter(
            [(kg, by_key) for by_kg in table.namespaces.values() for kg, by_key in by_kg.items()]
        )
        self.key_group = -1
        self.by_key: dict[Any, Any] = {}
        self.keys: list[Any] = []

    def advance(self) -> bool:
        for self.key_group, self.by_key in self.maps:  # noqa: B020 (the cursor's own fields)
            if self.by_key:
                self.keys = list(self.by_key)
                return True
        return False


class HeapKeyedStateBackend(KeyedStateBackend):
    """Keyed state in Python dicts: fastest per record, bounded by the worker's memory.

    >>> from statecore.descriptors import ValueStateDescriptor
    >>> from statecore.keygroups import KeyGroupRange
    >>> from statecore.types import TypeInfo
    >>> backend = HeapKeyedStateBackend(
    ...     key_type=TypeInfo.of(str), key_group_range=KeyGroupRange(0, 127), max_parallelism=128)
    >>> total = backend.get_partitioned_state(ValueStateDescriptor("total", int, default=0))
    >>> backend.set_current_key("user-1")
    >>> total.update(total.value() + 5)
    >>> total.value()
    5
    """

    incremental_ttl_cleanup = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._tables: dict[str, StateTable] = {}
        self._cleanup_cursors: dict[str, _CleanupCursor] = {}

    def _create_state(self, descriptor: StateDescriptor) -> State:
        table = self._tables[descriptor.name] = StateTable(descriptor, self._new_dirty_set())
        return _STATE_CLASSES[descriptor.kind](self, table)

    def _table(self, state_name: str) -> StateTable:
        self.descriptor(state_name)  # raises UnknownStateError
        return self._tables[state_name]

    def keys(self, state_name: str, namespace: str = VOID_NAMESPACE) -> Iterator[Any]:
        for by_key in self._table(state_name).namespaces.get(namespace, {}).values():
            yield from by_key

    def _cleanup_incrementally(self, state_name: str, purge: Purge, count: int) -> None:
        table = self._tables[state_name]
        cursor = self._cleanup_cursors.get(state_name)
        if cursor is None:
            cursor = self._cleanup_cursors[state_name] = _CleanupCursor(table)
        while count > 0:
            if not cursor.keys and not cursor.advance():
                del self._cleanup_cursors[state_name]  # a full round done; next access restarts
                return
            batch = cursor.keys[-count:]
            del cursor.keys[-count:]
            count -= len(batch)
            by_key = cursor.by_key
            for key in batch:
                stored = by_key.get(key)
                if stored is None:
                    continue
                remaining = purge(stored)
                if remaining is stored:
                    continue
                if remaining is None:
                    del by_key[key]
                else:
                    by_key[key] = remaining
                mark_changed(table.dirty, cursor.key_group, key)

    def changed_key_groups(self, state_name: str) -> set[int]:
        return set(self._table(state_name).dirty)

    def _dirty_set(self, state_name: str) -> set[int]:
        return self._table(state_name).dirty

    def mark_snapshotted(self) -> None:
        for table in self._tables.values():
            table.dirty.clear()

    def _snapshot_key_group(self, state_name: str, key_group: int) -> pa.Table:
        return self._snapshot_keys(state_name, key_group, None)

    def _snapshot_keys(
        self, state_name: str, key_group: int, only: Collection[Any] | None
    ) -> pa.Table:
        table = self._table(state_name)
        descriptor = table.descriptor
        keys: list[Any] = []
        runs: list[tuple[str, int]] = []  # (namespace, rows): the namespace column, run-length
        user_keys: list[Any] = []
        values: list[Any] = []
        is_map = descriptor.kind is StateKind.MAP
        for namespace, by_kg in table.namespaces.items():
            by_key = by_kg.get(key_group)
            if not by_key:
                continue
            if only is not None:
                by_key = {k: by_key[k] for k in only if k in by_key}
            start = len(keys)
            if is_map:
                for key, entries in by_key.items():
                    keys.extend([key] * len(entries))
                    user_keys.extend(entries)
                    values.extend(entries.values())
            else:
                keys.extend(by_key)
                values.extend(by_key.values())
            runs.append((namespace, len(keys) - start))
        schema = snapshot_schema(self.key_type, descriptor)
        info = descriptor.value_info
        try:
            columns = [
                pa.array(keys, schema.field("key").type),
                pa.concat_arrays(
                    [pa.repeat(pa.scalar(namespace, pa.string()), n) for namespace, n in runs]
                )
                if runs
                else pa.array([], pa.string()),
            ]
            if is_map:
                assert descriptor.user_key_info is not None
                columns.append(
                    pa.array(
                        descriptor.user_key_info.to_storage(user_keys),
                        schema.field("user_key").type,
                    )
                )
            columns.append(pa.array(info.to_storage(values), schema.field("value").type))
            return pa.Table.from_arrays(columns, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise CorruptSnapshotError(
                f"state {state_name!r}, key group {key_group}: values do not match the declared "
                f"type {info.arrow}: {exc}"
            ) from exc

    def _restore_key_group(self, state_name: str, key_group: int, rows: pa.Table) -> None:
        table = self._table(state_name)
        descriptor = table.descriptor
        keys = rows.column("key").to_pylist()
        namespaces = rows.column("namespace").to_pylist()
        values = descriptor.value_info.from_storage(rows.column("value").to_pylist())
        if descriptor.kind is StateKind.MAP:
            assert descriptor.user_key_info is not None
            user_keys = descriptor.user_key_info.from_storage(rows.column("user_key").to_pylist())
            for key, namespace, user_key, value in zip(keys, namespaces, user_keys, values):
                by_key = table.namespaces.setdefault(namespace, {}).setdefault(key_group, {})
                by_key.setdefault(key, {})[user_key] = value
            return
        for namespace in set(namespaces):
            table.namespaces.setdefault(namespace, {}).setdefault(key_group, {})
        for key, namespace, value in zip(keys, namespaces, values):
            table.namespaces[namespace][key_group][key] = value
