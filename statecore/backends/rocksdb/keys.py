"""The RocksDB key layout: ``[key group][key][namespace]`` (+ ``[user key]`` for map entries).

The key group is two big-endian bytes, so one key group's entries are contiguous and key groups
sort in order: a snapshot of key group ``g`` is one range scan ``[g, g + 1)``, and clipping an
instance to a key-group range is two ``delete_range`` calls. The key and the namespace are
self-delimiting (:mod:`statecore.backends.rocksdb.codec`), so a prefix seek on
``[key group][key][namespace]`` finds exactly one map's entries. The map's user key is the tail
of the RocksDB key, in its whole-value form.

>>> layout = KeyLayout(pa.string())
>>> prefix = layout.prefix("user-1", 7)
>>> prefix
b'\\x00\\x07\\x06user-1'
>>> db_key = prefix + layout.namespace("w1") + b"tail"
>>> layout.split(db_key)
('user-1', 'w1', 12)
>>> key_group_bounds(7)
(b'\\x00\\x07', b'\\x00\\x08')
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statecore.backends.rocksdb.codec import codec_for, encode_length, read_varint

__all__ = [
    "KEY_GROUP_PREFIX_BYTES",
    "KeyLayout",
    "key_group_bytes",
    "key_group_bounds",
    "prefix_successor",
]

KEY_GROUP_PREFIX_BYTES = 2
_KG = struct.Struct(">H")
_I64 = struct.Struct("<q")
_KG_CACHE: dict[int, bytes] = {}


def key_group_bytes(key_group: int) -> bytes:
    """The two-byte big-endian prefix of ``key_group``."""
    cached = _KG_CACHE.get(key_group)
    if cached is None:
        cached = _KG_CACHE[key_group] = _KG.pack(key_group)
    return cached


def key_group_bounds(key_group: int, last: int | None = None) -> tuple[bytes, bytes]:
    """``[lower, upper)`` RocksDB keys of key groups ``key_group..last`` (one group by default)."""
    end = key_group if last is None else last
    upper = _KG.pack(end + 1) if end + 1 <= 0xFFFF else b"\xff\xff\xff"
    return _KG.pack(key_group), upper


def prefix_successor(prefix: bytes) -> bytes:
    """The smallest key greater than every key that starts with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:  # never for statecore keys: the key group's first byte is below 0x80
        raise ValueError(f"no key follows every key with the prefix {prefix!r}")
    return stripped[:-1] + bytes((stripped[-1] + 1,))


@lru_cache(maxsize=1)
def _group_prefixes() -> list[bytes]:
    return [_KG.pack(g) for g in range(1 << 15)]


def _key_encoder(arrow: pa.DataType) -> Callable[[Any], bytes]:
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):

        def encode_str(key: Any) -> bytes:
            data = key.encode()
            return encode_length(len(data)) + data  # type: ignore[no-any-return]

        return encode_str
    if arrow == pa.int64():
        return _I64.pack
    write = codec_for(arrow).write

    def encode(key: Any) -> bytes:
        out = bytearray()
        write(key, out)
        return bytes(out)

    return encode


class KeyLayout:
    """Builds and splits RocksDB keys for one backend's key type."""

    __slots__ = ("key_type", "_encode_key", "_read_key", "_namespaces")

    def __init__(self, key_type: pa.DataType) -> None:
        self.key_type = key_type
        self._encode_key = _key_encoder(key_type)
        self._read_key = codec_for(key_type).read
        self._namespaces: dict[str, bytes] = {}

    def prefix(self, key: Any, key_group: int) -> bytes:
        """``[key group][key]``: raises ``TypeError`` or ``struct.error`` for a mistyped key."""
        return key_group_bytes(key_group) + self._encode_key(key)

    def prefix_function(self) -> Callable[[Any, int], bytes]:
        """:meth:`prefix` as one call (the per-record path)."""
        groups = _group_prefixes()
        if pa.types.is_string(self.key_type) or pa.types.is_large_string(self.key_type):
            small = [bytes((n,)) for n in range(128)]

            def prefix_of_str(key: Any, key_group: int) -> bytes:
                data: bytes = key.encode()
                n = len(data)
                return groups[key_group] + (small[n] if n < 128 else encode_length(n)) + data

            return prefix_of_str
        encode = self._encode_key

        def prefix_of(key: Any, key_group: int) -> bytes:
            return groups[key_group] + encode(key)

        return prefix_of

    def prefixes(self, keys: pa.Array, key_groups: pa.Array) -> list[bytes] | None:
        """The prefix of every row (``keys[i]`` in ``key_groups[i]``), built as one column: the
        per-batch form of :meth:`prefix_function`, byte for byte. For a string column of string
        keys each under 128 UTF-8 bytes (a one-byte length), without nulls; ``None`` otherwise,
        and the caller encodes each key with :meth:`prefix_function` (which raises for a key of
        the wrong type).

        >>> layout = KeyLayout(pa.string())
        >>> layout.prefixes(pa.array(["user-1", ""]), pa.array([7, 300], pa.int32()))
        [b'\\x00\\x07\\x06user-1', b'\\x01,\\x00']
        """
        if not (pa.types.is_string(self.key_type) or pa.types.is_large_string(self.key_type)):
            return None
        n = len(keys)
        if n == 0 or not pa.types.is_string(keys.type) or keys.null_count or key_groups.null_count:
            return None
        lengths = pc.binary_length(keys).to_numpy(zero_copy_only=False)
        groups = key_groups.to_numpy(zero_copy_only=False).astype(np.int64)
        if lengths.max() >= 128 or groups.min() < 0 or groups.max() > 0xFFFF:
            return None
        head = np.empty((n, 3), np.uint8)  # [key group, 2 bytes big-endian][length, 1 byte]
        head[:, 0] = groups >> 8
        head[:, 1] = groups & 0xFF
        head[:, 2] = lengths
        heads = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(3), n, [None, pa.py_buffer(head)]
        ).cast(pa.binary())
        joined = pc.binary_join_element_wise(heads, keys.cast(pa.binary()), b"")
        return joined.to_pylist()  # type: ignore[no-any-return]

    def namespace(self, namespace: str) -> bytes:
        cached = self._namespaces.get(namespace)
        if cached is None:
            data = namespace.encode()
            cached = encode_length(len(data)) + data
            if len(self._namespaces) < 4096:
                self._namespaces[namespace] = cached
        return cached

    def split(self, db_key: bytes) -> tuple[Any, str, int]:
        """``(key, namespace, position of the tail)`` of a RocksDB key."""
        key, pos = self._read_key(db_key, KEY_GROUP_PREFIX_BYTES)
        n = db_key[pos]
        if n < 128:
            start = pos + 1
        else:
            n, start = read_varint(db_key, pos)
        end = start + n
        return key, db_key[start:end].decode(), end
