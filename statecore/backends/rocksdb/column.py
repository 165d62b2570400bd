"""One registered state as stored in RocksDB: its column family and how its bytes are formed.

A :class:`StateColumn` knows, for its state kind, the stored form of a value and how it maps to
the backend-independent snapshot columns:

========================  ===================================  ==============================
kind                      RocksDB key                          RocksDB value
========================  ===================================  ==============================
value/reducing/aggregate  ``[kg][key][namespace]``             the value
list                      ``[kg][key][namespace]``             the elements, concatenated
map                       ``[kg][key][namespace][user key]``   presence byte + the value
========================  ===================================  ==============================

A list is its elements' self-delimiting forms back to back, with no count in front, so
``ListState.add`` appends bytes to the stored value without decoding the elements already there
(RocksDB merge operators would avoid even the read; ``rocksdict`` has none).
Values of :data:`statecore.types.PICKLED` types are stored as their pickled bytes, which are also
their snapshot form: snapshots and restores never unpickle.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import rocksdict

from statecore.backends.rocksdb.cache import ValueCache
from statecore.backends.rocksdb.codec import Codec, codec_for, read_varint, write_varint
from statecore.backends.rocksdb.keys import KeyLayout
from statecore.descriptors import ListStateDescriptor, StateDescriptor, StateKind
from statecore.types import TypeInfo

__all__ = ["StateColumn", "user_codec"]

_NULL = b"\x00"
_PRESENT = b"\x01"


def _pickled_codec() -> Codec:
    def write(value: Any, out: bytearray) -> None:
        data = pickle.dumps(value)
        write_varint(len(data), out)
        out += data

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        n, pos = read_varint(buf, pos)
        return pickle.loads(buf[pos : pos + n]), pos + n

    return Codec(pa.binary(), encode=pickle.dumps, decode=pickle.loads, write=write, read=read)


_PICKLED = _pickled_codec()


def user_codec(info: TypeInfo) -> Codec:
    """The codec state methods use: Python values in, Python values out."""
    return _PICKLED if info.pickled else codec_for(info.arrow)


class StateColumn:
    """A registered state's column family, codecs, changed key groups and value cache."""

    def __init__(
        self,
        descriptor: StateDescriptor,
        cf: rocksdict.Rdict,
        layout: KeyLayout,
        dirty: set[int] | None = None,
    ) -> None:
        self.descriptor = descriptor
        self.name = descriptor.name
        self.kind = descriptor.kind
        self.cf = cf
        self.layout = layout
        self.dirty: set[int] = set() if dirty is None else dirty
        self.cache: ValueCache | None = None  # set by the backend for cached value states
        if isinstance(descriptor, ListStateDescriptor):
            element = descriptor.element_info
            self.value_codec = user_codec(element)
            self.storage_codec = codec_for(element.arrow)
        else:
            info = descriptor.value_info
            self.value_codec = user_codec(info)
            self.storage_codec = codec_for(info.arrow)
        user_key = descriptor.user_key_info
        self.user_key_codec = None if user_key is None else user_codec(user_key)
        self.user_key_storage = None if user_key is None else codec_for(user_key.arrow)

    # -- list values -------------------------------------------------------------------------
    def encode_elements(self, values: Iterable[Any]) -> bytes:
        out = bytearray()
        write = self.value_codec.write
        for v in values:
            write(v, out)
        return bytes(out)

    def decode_elements(self, data: bytes) -> list[Any]:
        read = self.value_codec.read
        items = []
        pos, end = 0, len(data)
        while pos < end:
            item, pos = read(data, pos)
            items.append(item)
        return items

    # -- map values --------------------------------------------------------------------------
    def encode_map_value(self, value: Any) -> bytes:
        return _NULL if value is None else _PRESENT + self.value_codec.encode(value)

    def decode_map_value(self, data: bytes) -> Any:
        return None if data == _NULL else self.value_codec.decode(data[1:])

    # -- snapshot rows <-> entries -----------------------------------------------------------
    def to_row(self, db_key: bytes, data: bytes) -> tuple[Any, str, Any, Any]:
        """``(key, namespace, user key, value)`` in snapshot (storage) form."""
        key, namespace, end = self.layout.split(db_key)
        storage = self.storage_codec
        if self.kind is StateKind.MAP:
            assert self.user_key_storage is not None
            user_key = self.user_key_storage.decode(db_key[end:])
            value = None if data == _NULL else storage.decode(data[1:])
            return key, namespace, user_key, value
        if self.kind is StateKind.LIST:
            read = storage.read
            items = []
            pos, stop = 0, len(data)
            while pos < stop:
                item, pos = read(data, pos)
                items.append(item)
            return key, namespace, None, items
        return key, namespace, None, storage.decode(data)

    def to_entry(
        self, key_group: int, key: Any, namespace: str, user_key: Any, value: Any
    ) -> tuple[bytes, bytes] | None:
        """The RocksDB entry of one snapshot row (``None`` for rows that store nothing)."""
        layout = self.layout
        db_key = layout.prefix(key, key_group) + layout.namespace(namespace)
        storage = self.storage_codec
        if self.kind is StateKind.MAP:
            assert self.user_key_storage is not None
            db_key += self.user_key_storage.encode(user_key)
            return db_key, _NULL if value is None else _PRESENT + storage.encode(value)
        if value is None:
            return None
        if self.kind is StateKind.LIST:
            if not value:
                return None
            out = bytearray()
            write = storage.write
            for item in value:
                write(item, out)
            return db_key, bytes(out)
        return db_key, storage.encode(value)

    def snapshot_columns(self, rows: list[tuple[Any, str, Any, Any]]) -> dict[str, list[Any]]:
        columns: dict[str, list[Any]] = {
            "key": [r[0] for r in rows],
            "namespace": [r[1] for r in rows],
        }
        if self.kind is StateKind.MAP:
            columns["user_key"] = [r[2] for r in rows]
        columns["value"] = [r[3] for r in rows]
        return columns
