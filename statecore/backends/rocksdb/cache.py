"""A bounded write-back cache of single values in front of RocksDB (Kafka Streams' record cache).

A ``ValueState`` whose values are immutable Python scalars keeps the values of recently used keys
in a dict keyed by their RocksDB key (``[key group][key][namespace]``), ``None`` for a key known
to have no value. A read is served from the dict or fills it with one ``get``; ``update`` and
``clear`` change the dict and record the entry's encoded bytes (or its deletion) as pending.
Pending entries reach RocksDB in one ``WriteBatch``:

- when the cache holds more than its capacity (then the older half of its entries is dropped);
- before anything reads RocksDB other than a point get of the state: snapshots, key scans,
  TTL cleanup, bulk loads, the local manifest and ``close`` (the backend calls
  :meth:`ValueCache.flush`; a bulk load also empties the cache, :meth:`ValueCache.clear`, and
  ``close`` drops it, so a closed backend serves nothing from memory).

Values are encoded by ``update``, so a value that cannot be stored fails there, as without the
cache, and the cached value is what RocksDB would return: the value itself when it is of the
type's own class, else its decoded bytes (an ``int`` stored in a ``float64`` state reads back as a
``float``). Values that could change after they are stored (pickled objects, lists, structs, maps,
and the ``{"value", "ttl_timestamp"}`` dicts of TTL states) and ``float32`` (stored rounded) are
never cached (:func:`cached_class` is ``None``).

>>> cached_class(TypeInfo.of(int)), cached_class(TypeInfo.of(float))
(<class 'int'>, <class 'float'>)
>>> cached_class(TypeInfo.of(pa.list_(pa.int64()))) is None
True
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import Any, Final

import pyarrow as pa
import rocksdict

from statecore.types import TypeInfo

__all__ = ["ValueCache", "cached_class", "MISSING"]

MISSING: Final = object()
"""What ``ValueCache.values.get(key, MISSING)`` returns for a key the cache does not know."""

_OWN_CLASSES: dict[pa.DataType, type] = {
    pa.int64(): int,
    pa.int32(): int,
    pa.int16(): int,
    pa.int8(): int,
    pa.float64(): float,
    pa.string(): str,
    pa.large_string(): str,
    pa.binary(): bytes,
    pa.large_binary(): bytes,
    pa.bool_(): bool,
}


def cached_class(info: TypeInfo) -> type | None:
    """The class of the values a state of ``info`` may cache, or ``None`` (never cached)."""
    if info.pickled or info.pickled_elements:
        return None
    return _OWN_CLASSES.get(info.arrow)


class ValueCache:
    """The cached values of one state's column family and its pending writes."""

    __slots__ = ("values", "pending", "capacity", "value_class", "_handle", "_write")

    def __init__(
        self,
        *,
        capacity: int,
        value_class: type,
        handle: Callable[[], Any],
        write: Callable[[rocksdict.WriteBatch], None],
    ) -> None:
        self.values: dict[bytes, Any] = {}
        """RocksDB key -> value (``None``: no value)."""
        self.pending: dict[bytes, bytes | None] = {}
        """RocksDB key -> encoded value (``None``: delete) not yet written."""
        self.capacity = capacity
        self.value_class = value_class
        self._handle = handle
        self._write = write

    def flush(self) -> None:
        """Write the pending entries in one batch."""
        pending = self.pending
        if not pending:
            return
        batch = rocksdict.WriteBatch(raw_mode=True)
        handle = self._handle()  # asked for each time: a held handle keeps the database open
        for key, data in pending.items():
            if data is None:
                batch.delete(key, handle)
            else:
                batch.put(key, data, handle)
        self._write(batch)
        pending.clear()

    def shrink(self) -> None:
        """Flush, then drop the older half of the entries (in order of first use)."""
        self.flush()
        values = self.values
        for key in list(islice(values, len(values) - self.capacity // 2)):
            del values[key]

    def clear(self) -> None:
        """Flush and forget every entry (RocksDB changed underneath: a bulk load)."""
        self.flush()
        self.values.clear()

    def drop(self) -> None:
        """Forget every entry and pending write (the database is closing)."""
        self.values.clear()
        self.pending.clear()
