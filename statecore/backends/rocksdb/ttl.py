"""Expired TTL entries in RocksDB, without compaction filters.

Flink's RocksDB backend drops expired entries in a compaction filter: RocksDB's background
compactions call back into a filter that reads each value's timestamp and discards it when
expired, so cleanup costs nothing on the processing path but runs only when and where RocksDB
happens to compact. ``rocksdict`` exposes no compaction filters, and a background thread of our
own cannot delete safely either: without transactions there is no "delete if still expired", so
it could delete a value the task re-wrote a moment earlier. Cleanup therefore runs on the task's
own thread, in the places Flink's other strategies use:

- **on read** (always): the TTL decorator layer (:mod:`statecore.ttl.states`) hides an expired
  value and deletes it when it reads it;
- **in snapshots** (``CleanupStrategy.FULL_SNAPSHOT``): expired entries are left out of the
  snapshot rows (:meth:`statecore.backends.base.KeyedStateBackend.snapshot_key_group`);
- **incrementally** (``CleanupStrategy.INCREMENTAL``), our stand-in for the compaction filter: a
  cursor walks the state's column family in key order, ``cleanup_size`` entries per state access
  (every record with ``run_cleanup_for_every_record``), deleting expired entries and rewriting
  lists whose elements partly expired. :meth:`RocksDBKeyedStateBackend.cleanup_expired` runs the
  same scan in larger bounded steps, e.g. between micro-batches.

The stored form puts each value's timestamp first (:mod:`statecore.backends.rocksdb.codec`), so
the scan reads it at a fixed offset.
"""

from __future__ import annotations

from itertools import islice

import rocksdict

from statecore.backends.base import Purge
from statecore.backends.changes import mark_changed
from statecore.backends.rocksdb.column import StateColumn
from statecore.backends.rocksdb.keys import KEY_GROUP_PREFIX_BYTES, key_group_bounds
from statecore.descriptors import StateKind
from statecore.keygroups import KeyGroupRange

__all__ = ["CleanupCursor"]


class CleanupCursor:
    """Where the incremental scan of one state resumes (a RocksDB key), within a key-group range."""

    __slots__ = ("_next", "_lower", "_upper")

    def __init__(self, key_groups: KeyGroupRange) -> None:
        self._lower, self._upper = key_group_bounds(key_groups.start, key_groups.end)
        self._next = self._lower

    def step(self, column: StateColumn, purge: Purge, count: int) -> tuple[int, int]:
        """Apply ``purge`` to the next ``count`` entries; ``(entries visited, entries changed)``.

        The cursor wraps to the start of the range after the last entry. Every key group in
        which an entry changed is marked changed for the next snapshot.
        """
        read = rocksdict.ReadOptions()
        read.set_iterate_upper_bound(self._upper)
        items = column.cf.items(from_key=self._next, read_opt=read)
        entries: list[tuple[bytes, bytes]] = list(islice(items, count))  # type: ignore[arg-type]
        del items  # release the iterator (it keeps the database open)
        if len(entries) < count:
            self._next = self._lower
        else:
            self._next = entries[-1][0] + b"\x00"
        changed = 0
        for db_key, data in entries:
            remaining = _purged(column, purge, data)
            if remaining is data:
                continue
            if remaining is None:
                column.cf.delete(db_key)
            else:
                column.cf.put(db_key, remaining)
            key_group = int.from_bytes(db_key[:KEY_GROUP_PREFIX_BYTES], "big")
            mark_changed(column.dirty, key_group, column.layout.split(db_key)[0])
            changed += 1
        return len(entries), changed


def _purged(column: StateColumn, purge: Purge, data: bytes) -> bytes | None:
    """The stored bytes left after ``purge``: ``data`` itself when nothing expired."""
    if column.kind is StateKind.MAP:
        entry = {0: column.decode_map_value(data)}
        left = purge(entry)
        return data if left is entry else None
    if column.kind is StateKind.LIST:
        elements = column.decode_elements(data)
        left = purge(elements)
        if left is elements:
            return data
        return None if left is None else column.encode_elements(left)
    stored = column.value_codec.decode(data)
    return data if purge(stored) is stored else None
