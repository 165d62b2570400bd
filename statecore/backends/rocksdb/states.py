"""RocksDB implementations of the five keyed state kinds.

Each access builds the RocksDB key from the backend's current ``[key group][key]`` prefix (made
once per record in ``set_current_key``) and the state's namespace bytes (made once per
``set_current_namespace``), then does one ``get`` and/or one ``put`` on the state's column
family. Writes remember their key group for the next incremental snapshot. A ``ValueState`` of
immutable scalars reads and writes through its column's write-back cache instead
(:mod:`statecore.backends.rocksdb.cache`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NoReturn, Protocol

import rocksdict

from statecore.backends.context import KeyContext
from statecore.backends.merging import NO_ACCUMULATOR, accumulation_for
from statecore.backends.rocksdb.cache import MISSING
from statecore.backends.rocksdb.column import StateColumn
from statecore.backends.rocksdb.keys import prefix_successor
from statecore.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateKind,
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
    State,
    ValueState,
)
from statecore.types import TypeInfo

__all__ = [
    "RocksDBValueState",
    "RocksDBCachedValueState",
    "RocksDBListState",
    "RocksDBMapState",
    "RocksDBReducingState",
    "RocksDBAggregatingState",
    "STATE_CLASSES",
    "StateHost",
]


class StateHost(Protocol):
    """What a state needs of its backend (a
    :class:`~statecore.backends.rocksdb.backend.RocksDBKeyedStateBackend`): the current key,
    and a state's column family handle and the backend's write path for batched deletes."""

    key_context: KeyContext

    def _cf_handle(self, state_name: str) -> Any: ...

    def _write(self, batch: rocksdict.WriteBatch) -> None: ...


class _RocksDBState:
    __slots__ = (
        "_backend",
        "_current",
        "_column",
        "_name",
        "_get",
        "_put",
        "_delete",
        "_dirty",
        "_ns",
    )

    def __init__(self, backend: StateHost, column: StateColumn) -> None:
        self._backend = backend
        self._current = backend.key_context
        self._column = column
        self._name = column.name
        self._get = column.cf.get
        self._put = column.cf.put
        self._delete = column.cf.delete
        self._dirty = column.dirty
        self._ns = column.layout.namespace(VOID_NAMESPACE)

    def set_current_namespace(self, namespace: str) -> None:
        if not isinstance(namespace, str):
            raise StateAccessError(
                f"state {self._name!r}: namespace must be a str, got {type(namespace).__name__}"
            )
        self._ns = self._column.layout.namespace(namespace)

    def _no_key(self) -> NoReturn:
        raise StateAccessError(
            f"state {self._name!r} used outside a keyed context (no current key)"
        )

    def _key_group(self) -> int:
        key_group = self._current.key_group
        if key_group is None:
            self._no_key()
        return key_group

    def _db_key(self) -> bytes:
        current = self._current
        if current.key_group is None:
            self._no_key()
        return current.prefix + self._ns

    def _check(self, info: TypeInfo, value: Any, what: str = "value") -> None:
        info.check(value, state=self._name, what=what)

    def _encoding_failed(self, value: Any, exc: Exception, what: str = "value") -> NoReturn:
        raise StateAccessError(
            f"state {self._name!r}: {what} {value!r} cannot be stored as "
            f"{self._column.storage_codec.arrow}: {exc}"
        ) from exc

    def clear(self) -> None:
        key = self._db_key()
        if self._get(key) is not None:
            self._delete(key)
            self._dirty.add(self._key_group())

    def _merge_namespaces(
        self, target: str, sources: Iterable[str], merge: Callable[[bytes, bytes], bytes]
    ) -> None:
        """Move the current key's stored values of ``sources`` into ``target``, merging bytes."""
        key_group = self._key_group()
        prefix = self._current.prefix
        namespace = self._column.layout.namespace
        merged: bytes | None = None
        for source in sources:
            key = prefix + namespace(source)
            data = self._get(key)
            if data is None:
                continue
            self._delete(key)
            merged = data if merged is None else merge(merged, data)
        if merged is not None:
            key = prefix + namespace(target)
            existing = self._get(key)
            self._put(key, merged if existing is None else merge(existing, merged))
            self._dirty.add(key_group)


class RocksDBValueState(_RocksDBState, ValueState):
    __slots__ = ("_default", "_fresh_default", "_info", "_accepted", "_encode", "_decode")

    def __init__(self, backend: StateHost, column: StateColumn) -> None:
        super().__init__(backend, column)
        descriptor = column.descriptor
        assert isinstance(descriptor, ValueStateDescriptor)
        self._default = descriptor.default
        self._fresh_default = descriptor.default_factory  # None: the default is immutable
        self._info = descriptor.value_info
        self._accepted = self._info.accepted or ()
        self._encode = column.value_codec.encode
        self._decode = column.value_codec.decode

    def value(self) -> Any:
        current = self._current
        if current.key_group is None:
            self._no_key()
        data = self._get(current.prefix + self._ns)
        if data is not None:
            return self._decode(data)
        return self._default if self._fresh_default is None else self._fresh_default()

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        if value.__class__ not in self._accepted:
            self._check(self._info, value)
        current = self._current
        key_group = current.key_group
        if key_group is None:
            self._no_key()
        try:
            data = self._encode(value)
        except Exception as exc:
            self._encoding_failed(value, exc)
        self._put(current.prefix + self._ns, data)
        self._dirty.add(key_group)


class RocksDBCachedValueState(RocksDBValueState):
    """A ``ValueState`` served by its column's write-back cache (values are immutable scalars)."""

    __slots__ = ("_shrink", "_values", "_pending", "_capacity", "_value_class")

    def __init__(self, backend: StateHost, column: StateColumn) -> None:
        super().__init__(backend, column)
        cache = column.cache
        assert cache is not None
        self._shrink = cache.shrink
        self._values = cache.values
        self._pending = cache.pending
        self._capacity = cache.capacity
        self._value_class = cache.value_class

    def value(self) -> Any:
        current = self._current
        if current.key_group is None:
            self._no_key()
        key = current.prefix + self._ns
        values = self._values
        value = values.get(key, MISSING)
        if value is MISSING:
            data = self._get(key)
            value = values[key] = None if data is None else self._decode(data)
            if len(values) > self._capacity:
                self._shrink()
        if value is not None:
            return value
        return self._default if self._fresh_default is None else self._fresh_default()

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        cls = value.__class__
        if cls not in self._accepted:
            self._check(self._info, value)
        current = self._current
        key_group = current.key_group
        if key_group is None:
            self._no_key()
        key = current.prefix + self._ns
        try:
            data = self._encode(value)
        except Exception as exc:
            self._encoding_failed(value, exc)
        values = self._values
        values[key] = value if cls is self._value_class else self._decode(data)
        self._pending[key] = data
        self._dirty.add(key_group)
        if len(values) > self._capacity:
            self._shrink()

    def clear(self) -> None:
        key = self._db_key()
        values = self._values
        value = values.get(key, MISSING)
        if value is MISSING:
            value = self._get(key)
        if value is not None:
            self._pending[key] = None
            self._dirty.add(self._key_group())
        values[key] = None
        if len(values) > self._capacity:
            self._shrink()


class RocksDBListState(_RocksDBState, ListState):
    __slots__ = ("_info",)

    def __init__(self, backend: StateHost, column: StateColumn) -> None:
        super().__init__(backend, column)
        descriptor = column.descriptor
        assert isinstance(descriptor, ListStateDescriptor)
        self._info = descriptor.element_info

    def _checked(self, values: Iterable[Any]) -> list[Any]:
        if values is None:
            raise StateAccessError(f"state {self._name!r}: the list of values must not be None")
        return list(values)

    def _encode(self, values: list[Any]) -> bytes:
        for v in values:
            self._check(self._info, v, "list element")
        try:
            return self._column.encode_elements(values)
        except Exception as exc:
            self._encoding_failed(values, exc, "list")

    def get(self) -> list[Any]:
        data = self._get(self._db_key())
        return [] if data is None else self._column.decode_elements(data)

    def add(self, value: Any) -> None:
        self._append(self._encode([value]))

    def add_all(self, values: Iterable[Any]) -> None:
        values = self._checked(values)
        if values:
            self._append(self._encode(values))

    def _append(self, data: bytes) -> None:
        key = self._db_key()
        current = self._get(key)
        self._put(key, data if current is None else current + data)
        self._dirty.add(self._key_group())

    def update(self, values: Iterable[Any]) -> None:
        values = self._checked(values)
        if not values:
            self.clear()
            return
        data = self._encode(values)
        self._put(self._db_key(), data)
        self._dirty.add(self._key_group())

    def merge_namespaces(self, target: str, sources: Iterable[str]) -> None:
        self._merge_namespaces(target, sources, bytes.__add__)


class RocksDBMapState(_RocksDBState, MapState):
    __slots__ = ("_key_info", "_info", "_encode_user_key", "_decode_user_key")

    def __init__(self, backend: StateHost, column: StateColumn) -> None:
        super().__init__(backend, column)
        descriptor = column.descriptor
        assert isinstance(descriptor, MapStateDescriptor)
        assert column.user_key_codec is not None
        self._key_info = descriptor.user_key_info
        self._info = descriptor.value_info
        self._encode_user_key = column.user_key_codec.encode
        self._decode_user_key = column.user_key_codec.decode

    def _entry_key(self, user_key: Any) -> bytes:
        try:
            tail = self._encode_user_key(user_key)
        except Exception as exc:
            self._encoding_failed(user_key, exc, "map key")
        return self._db_key() + tail

    def get(self, key: Any) -> Any:
        data = self._get(self._entry_key(key))
        return None if data is None else self._column.decode_map_value(data)

    def put(self, key: Any, value: Any) -> None:
        self._check(self._key_info, key, "map key")
        if value is not None:
            self._check(self._info, value, "map value")
        entry = self._entry_key(key)
        try:
            data = self._column.encode_map_value(value)
        except Exception as exc:
            self._encoding_failed(value, exc, "map value")
        self._put(entry, data)
        self._dirty.add(self._key_group())

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        for k, v in entries.items():
            self.put(k, v)

    def remove(self, key: Any) -> None:
        entry = self._entry_key(key)
        if self._get(entry) is not None:
            self._delete(entry)
            self._dirty.add(self._key_group())

    def contains(self, key: Any) -> bool:
        return self._get(self._entry_key(key)) is not None

    def _raw_entries(self, limit: int | None = None) -> list[tuple[bytes, bytes]]:
        prefix = self._db_key()
        read = rocksdict.ReadOptions()
        read.set_iterate_upper_bound(prefix_successor(prefix))
        out: list[tuple[bytes, bytes]] = []
        for entry in self._column.cf.items(from_key=prefix, read_opt=read):
            out.append(entry)  # type: ignore[arg-type]
            if limit is not None and len(out) >= limit:
                break
        return out

    def items(self) -> Iterator[tuple[Any, Any]]:
        start = len(self._db_key())
        decode_key, decode_value = self._decode_user_key, self._column.decode_map_value
        return iter([(decode_key(k[start:]), decode_value(v)) for k, v in self._raw_entries()])

    def keys(self) -> Iterator[Any]:
        start = len(self._db_key())
        decode_key = self._decode_user_key
        return iter([decode_key(k[start:]) for k, _ in self._raw_entries()])

    def is_empty(self) -> bool:
        return not self._raw_entries(limit=1)

    def __len__(self) -> int:
        return len(self._raw_entries())

    def clear(self) -> None:
        entries = self._raw_entries()
        if not entries:
            return
        batch = rocksdict.WriteBatch(raw_mode=True)
        handle = self._backend._cf_handle(self._name)
        for k, _ in entries:
            batch.delete(k, handle)
        self._backend._write(batch)
        self._dirty.add(self._key_group())


class _RocksDBMergingState(_RocksDBState, MergingState):
    """Reducing and aggregating state: one encoded accumulator per key and namespace (what is
    added and merged is the descriptor's :class:`~statecore.backends.merging.Accumulation`)."""

    __slots__ = ("_accumulation", "_encode", "_decode")

    def __init__(self, backend: StateHost, column: StateColumn) -> None:
        super().__init__(backend, column)
        self._accumulation = accumulation_for(column.descriptor)
        self._encode = column.value_codec.encode
        self._decode = column.value_codec.decode

    def get(self) -> Any:
        data = self._get(self._db_key())
        return None if data is None else self._accumulation.result(self._decode(data))

    def add(self, value: Any) -> None:
        accumulation = self._accumulation
        accumulation.check(value)
        key = self._db_key()
        data = self._get(key)
        accumulator = NO_ACCUMULATOR if data is None else self._decode(data)
        accumulator = accumulation.add(accumulator, value)
        try:
            encoded = self._encode(accumulator)
        except Exception as exc:
            self._encoding_failed(accumulator, exc, accumulation.what)
        self._put(key, encoded)
        self._dirty.add(self._key_group())

    def merge_namespaces(self, target: str, sources: Iterable[str]) -> None:
        encode, decode, merge = self._encode, self._decode, self._accumulation.merge
        self._merge_namespaces(target, sources, lambda a, b: encode(merge(decode(a), decode(b))))


class RocksDBReducingState(_RocksDBMergingState, ReducingState):
    __slots__ = ()

    pass


class RocksDBAggregatingState(_RocksDBMergingState, AggregatingState):
    __slots__ = ()

    pass


STATE_CLASSES: dict[StateKind, Callable[[StateHost, StateColumn], State]] = {
    ValueStateDescriptor.kind: RocksDBValueState,
    ListStateDescriptor.kind: RocksDBListState,
    MapStateDescriptor.kind: RocksDBMapState,
    ReducingStateDescriptor.kind: RocksDBReducingState,
    AggregatingStateDescriptor.kind: RocksDBAggregatingState,
}
