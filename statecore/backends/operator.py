"""Operator state: state per parallel instance, not per key (Flink's operator state backend).

It always lives on the heap. Three modes decide what each instance gets back when the job is
restored, possibly at another parallelism (Flink's ``RoundRobinOperatorStateRepartitioner``):

- ``SPLIT_DISTRIBUTE`` (:meth:`OperatorStateStore.get_list_state`): the elements of all old
  instances, in order of instance, are split into contiguous parts; the remainder goes one element
  each to the first instances, and the next split state starts where that left off;
- ``UNION`` (:meth:`OperatorStateStore.get_union_list_state`): every instance gets all elements;
- ``BROADCAST`` (:meth:`OperatorStateStore.get_broadcast_state`, a map): instance ``i`` gets the
  map of old instance ``i % old_parallelism``.

When the parallelism is unchanged, split and broadcast state stay where they were.

>>> [len(part["offsets"]) for part in repartition(
...     {"offsets": (OperatorStateMode.SPLIT_DISTRIBUTE, [list(range(10))])}, 1, 3)]
[4, 3, 3]

A snapshot of one state is rows of one instance: ``mode`` and ``value`` (list states: one row per
element, in order) or ``mode``, ``user_key`` and ``value`` (broadcast state: one row per entry);
the table adds the instance as the ``subtask`` partition column.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa

from statecore.compatibility import migrate_rows
from statecore.descriptors import ListStateDescriptor, MapStateDescriptor, StateDescriptor
from statecore.errors import (
    ConfigError,
    CorruptSnapshotError,
    StateAccessError,
    StateDescriptorConflictError,
    StateMigrationError,
)
from statecore.state import VOID_NAMESPACE, ListState, MapState

__all__ = [
    "OperatorStateMode",
    "OperatorListState",
    "BroadcastState",
    "OperatorStateStore",
    "operator_state_schema",
    "repartition",
]

T = TypeVar("T")


class OperatorStateMode(enum.Enum):
    SPLIT_DISTRIBUTE = "split_distribute"
    UNION = "union"
    BROADCAST = "broadcast"

    @property
    def catalog_kind(self) -> str:
        """The state kind the catalog records."""
        return {
            "split_distribute": "operator_list",
            "union": "union_list",
            "broadcast": "broadcast",
        }[self.value]


def operator_state_schema(descriptor: StateDescriptor, mode: OperatorStateMode) -> pa.Schema:
    """The snapshot rows of one operator state (without the ``subtask`` partition)."""
    fields = [pa.field("mode", pa.string(), nullable=False)]
    if isinstance(descriptor, MapStateDescriptor):
        fields.append(descriptor.user_key_info.field("user_key", nullable=False))
        fields.append(descriptor.value_info.field("value"))
    elif isinstance(descriptor, ListStateDescriptor):
        fields.append(descriptor.element_info.field("value", nullable=False))
    else:
        raise ConfigError(f"operator state {descriptor.name!r} needs a list or map descriptor")
    return pa.schema(fields)


def repartition(
    states: Mapping[str, tuple[OperatorStateMode, Sequence[Sequence[T]]]],
    old_parallelism: int,
    new_parallelism: int,
) -> list[dict[str, list[T]]]:
    """What each new instance restores: ``states`` maps a name to its mode and, per old instance,
    its elements (map entries for broadcast state)."""
    out: list[dict[str, list[T]]] = [{} for _ in range(new_parallelism)]
    start = 0
    for name in sorted(states):
        mode, parts = states[name]
        parts = list(parts) + [[] for _ in range(old_parallelism - len(parts))]
        if mode is OperatorStateMode.UNION:
            everything = [e for part in parts for e in part]
            for mine in out:
                mine[name] = list(everything)
        elif mode is OperatorStateMode.BROADCAST or new_parallelism == old_parallelism:
            for i, mine in enumerate(out):
                mine[name] = list(parts[i % old_parallelism])
        else:
            start = _split(name, [e for part in parts for e in part], out, start)
    return out


def _split(name: str, elements: list[T], out: list[dict[str, list[T]]], start: int) -> int:
    """Round-robin split of one state; the instance the next split state starts at."""
    p = len(out)
    base, remainder = divmod(len(elements), p)
    next_start = start
    position = 0
    for i in range(p):
        index = (i + start) % p
        count = base
        if remainder > 0:
            count += 1
            remainder -= 1
        elif remainder == 0:
            next_start = index
            remainder -= 1
        out[index][name] = elements[position : position + count]
        position += count
    return next_start


class OperatorListState(ListState):
    """The list of one parallel instance (split or union mode)."""

    def __init__(self, descriptor: ListStateDescriptor, mode: OperatorStateMode) -> None:
        self.descriptor = descriptor
        self.mode = mode
        self._info = descriptor.element_info
        self._values: list[Any] = []

    def _checked(self, value: Any) -> Any:
        if value is None or not self._info.accepts(value):
            raise StateAccessError(
                f"operator state {self.descriptor.name!r}: element {value!r} must be a "
                f"non-None value of type {self._info.arrow}"
            )
        return value

    def get(self) -> list[Any]:
        return list(self._values)

    def add(self, value: Any) -> None:
        self._values.append(self._checked(value))

    def add_all(self, values: Iterable[Any]) -> None:
        if values is None:
            raise StateAccessError(f"operator state {self.descriptor.name!r}: values are None")
        self._values.extend([self._checked(v) for v in values])

    def update(self, values: Iterable[Any]) -> None:
        if values is None:
            raise StateAccessError(f"operator state {self.descriptor.name!r}: values are None")
        self._values = [self._checked(v) for v in values]

    def clear(self) -> None:
        self._values = []

    def set_current_namespace(self, namespace: str) -> None:
        if namespace != VOID_NAMESPACE:
            raise StateAccessError("operator state has no namespaces")

    def merge_namespaces(self, target: str, sources: Iterable[str]) -> None:
        raise StateAccessError("operator state has no namespaces")

    def _rows(self) -> dict[str, list[Any]]:
        return {"value": self._info.to_storage(self._values)}

    def _restore(self, table: pa.Table) -> None:
        self._values = self._info.from_storage(table.column("value").to_pylist())


class BroadcastState(MapState):
    """A map that is the same on every instance (each instance keeps its own copy)."""

    def __init__(self, descriptor: MapStateDescriptor) -> None:
        self.descriptor = descriptor
        self.mode = OperatorStateMode.BROADCAST
        self._key_info = descriptor.user_key_info
        self._info = descriptor.value_info
        self._entries: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        return self._entries.get(key)

    def put(self, key: Any, value: Any) -> None:
        if (
            key is None
            or not self._key_info.accepts(key)
            or (value is not None and not self._info.accepts(value))
        ):
            raise StateAccessError(
                f"broadcast state {self.descriptor.name!r}: entry {key!r}: {value!r} does not "
                f"match {self._key_info.arrow} -> {self._info.arrow}"
            )
        self._entries[key] = value

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        for key, value in entries.items():
            self.put(key, value)

    def remove(self, key: Any) -> None:
        self._entries.pop(key, None)

    def contains(self, key: Any) -> bool:
        return key in self._entries

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._entries.items()))

    def is_empty(self) -> bool:
        return not self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries = {}

    def set_current_namespace(self, namespace: str) -> None:
        if namespace != VOID_NAMESPACE:
            raise StateAccessError("operator state has no namespaces")

    def _rows(self) -> dict[str, list[Any]]:
        return {
            "user_key": self._key_info.to_storage(list(self._entries)),
            "value": self._info.to_storage(list(self._entries.values())),
        }

    def _restore(self, table: pa.Table) -> None:
        keys = self._key_info.from_storage(table.column("user_key").to_pylist())
        values = self._info.from_storage(table.column("value").to_pylist())
        self._entries = dict(zip(keys, values))


OperatorState = OperatorListState | BroadcastState


class OperatorStateStore:
    """The operator state of one parallel instance: registered by name, restored lazily.

    ``restored`` holds, per state name, the rows this instance gets back (already redistributed
    by :func:`repartition`).

    >>> store = OperatorStateStore()
    >>> offsets = store.get_list_state(ListStateDescriptor("offsets", int))
    >>> offsets.add(42)
    >>> store.snapshot("offsets").to_pylist()
    [{'mode': 'split_distribute', 'value': 42}]
    """

    def __init__(self, *, restored: Mapping[str, pa.Table] | None = None) -> None:
        self._restored = dict(restored or {})
        self._states: dict[str, OperatorState] = {}

    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState:
        """A list whose elements are split evenly over the instances on restore."""
        return self._list(descriptor, OperatorStateMode.SPLIT_DISTRIBUTE)

    def get_union_list_state(self, descriptor: ListStateDescriptor) -> ListState:
        """A list whose elements all go to every instance on restore."""
        return self._list(descriptor, OperatorStateMode.UNION)

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        """A map restored on instance ``i`` from old instance ``i % old_parallelism``."""
        if not isinstance(descriptor, MapStateDescriptor):
            raise ConfigError(f"broadcast state {descriptor.name!r} needs a MapStateDescriptor")
        state = self._register(descriptor, OperatorStateMode.BROADCAST)
        assert isinstance(state, BroadcastState)
        return state

    def _list(self, descriptor: ListStateDescriptor, mode: OperatorStateMode) -> ListState:
        if not isinstance(descriptor, ListStateDescriptor):
            raise ConfigError(
                f"operator list state {descriptor.name!r} needs a ListStateDescriptor"
            )
        state = self._register(descriptor, mode)
        assert isinstance(state, OperatorListState)
        return state

    def _register(self, descriptor: StateDescriptor, mode: OperatorStateMode) -> OperatorState:
        if descriptor.ttl_config is not None:
            raise ConfigError(f"operator state {descriptor.name!r}: TTL is for keyed state only")
        known = self._states.get(descriptor.name)
        if known is not None:
            if known.mode is not mode or known.descriptor.describe() != descriptor.describe():
                raise StateDescriptorConflictError(
                    f"operator state {descriptor.name!r} is registered as {known.mode.value} "
                    f"{known.descriptor.describe()}; cannot register it again as {mode.value} "
                    f"{descriptor.describe()}"
                )
            return known
        state: OperatorState = (
            BroadcastState(descriptor)
            if isinstance(descriptor, MapStateDescriptor)
            else OperatorListState(descriptor, mode)  # type: ignore[arg-type]
        )
        rows = self._restored.pop(descriptor.name, None)
        if rows is not None and rows.num_rows:
            stored = set(rows.column("mode").to_pylist())
            if stored != {mode.value}:
                raise StateMigrationError(
                    f"operator state {descriptor.name!r} was stored as {sorted(stored)} and is "
                    f"registered as {mode.value}; the mode of an operator state cannot change"
                )
            rows = migrate_rows(
                rows,
                operator_state_schema(descriptor, mode),
                label=f"operator state {descriptor.name!r}",
            )
            try:
                state._restore(rows)
            except (KeyError, pa.ArrowInvalid) as exc:
                raise CorruptSnapshotError(
                    f"operator state {descriptor.name!r}: rows cannot be restored: {exc}"
                ) from exc
        self._states[descriptor.name] = state
        return state

    @property
    def state_names(self) -> list[str]:
        return sorted(self._states)

    def descriptor(self, name: str) -> StateDescriptor:
        return self._states[name].descriptor

    def mode(self, name: str) -> OperatorStateMode:
        return self._states[name].mode

    def schema(self, name: str) -> pa.Schema:
        state = self._states[name]
        return operator_state_schema(state.descriptor, state.mode)

    def snapshot(self, name: str) -> pa.Table:
        """The rows of state ``name`` on this instance."""
        state = self._states[name]
        columns = state._rows()
        n = len(columns["value"])
        try:
            return pa.Table.from_pydict(
                {"mode": [state.mode.value] * n, **columns}, schema=self.schema(name)
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise CorruptSnapshotError(
                f"operator state {name!r}: values do not match the declared type: {exc}"
            ) from exc
