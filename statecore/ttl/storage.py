"""How a state with a TTL is stored: each value with its last-access timestamp.

A backend stores a TTL state as an ordinary state whose values are Arrow structs
``{"value": v, "ttl_timestamp": ms}`` (Flink's ``TtlValue``): per value for value, reducing and
aggregating states (all stored as a value state of the accumulated value), per element for list
states, per entry for map states. Any backend that stores struct values stores TTL state without
knowing TTL exists.

In a snapshot the struct is split into the ``value`` column (exactly the column the state has
without TTL) and a ``ttl_timestamp`` column: int64 epoch milliseconds of the last access, or for
a list state a list of them parallel to the ``value`` list. So SQL sees plain values, turning TTL
on or off adds or drops one column, and ``DuckDB`` can ``unnest(value), unnest(ttl_timestamp)``
side by side.

``CleanupStrategy.FULL_SNAPSHOT`` filters the key groups a checkpoint writes, i.e. those that
changed (checkpoints are incremental per key group); an unchanged key group keeps its expired rows
until it changes or a TTL-cleanup run rewrites the table. Reads never return them either way under
``NEVER_RETURN_EXPIRED``.

>>> from datetime import timedelta
>>> from statecore.descriptors import ValueStateDescriptor
>>> from statecore.ttl.config import StateTtlConfig
>>> ttl = StateTtlConfig(ttl=timedelta(seconds=1))
>>> storage = TtlStorage(ValueStateDescriptor("v", int, ttl=ttl))
>>> storage.stored.value_info.arrow
StructType(struct<value: int64, ttl_timestamp: int64 not null>)
>>> storage.purge(now=1500)({"value": 7, "ttl_timestamp": 400}) is None
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statecore.descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    StateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from statecore.errors import ConfigError, CorruptSnapshotError
from statecore.ttl.config import CleanupStrategy, StateTtlConfig
from statecore.types import TypeInfo

__all__ = ["TTL_TIMESTAMP", "TtlStorage", "ttl_struct"]

TTL_TIMESTAMP = "ttl_timestamp"
VALUE = "value"


def ttl_struct(value_type: pa.DataType) -> pa.StructType:
    """The stored type of one TTL value: the user value and its last-access timestamp."""
    return pa.struct(
        [pa.field(VALUE, value_type), pa.field(TTL_TIMESTAMP, pa.int64(), nullable=False)]
    )


class TtlStorage:
    """The stored form of one TTL state, and its conversion to and from snapshot rows."""

    def __init__(self, descriptor: StateDescriptor) -> None:
        config = descriptor.ttl_config
        if config is None:
            raise ConfigError(f"state {descriptor.name!r} has no TTL")
        self.descriptor = descriptor
        self.config: StateTtlConfig = config
        self.ttl_ms = config.ttl_ms
        self.kind = descriptor.kind
        name = descriptor.name
        stored: StateDescriptor
        if isinstance(descriptor, ListStateDescriptor):
            inner = descriptor.element_info
            stored = ListStateDescriptor(name, ttl_struct(inner.arrow))
        elif isinstance(descriptor, MapStateDescriptor):
            inner = descriptor.value_info
            stored = MapStateDescriptor(name, descriptor.key_type, ttl_struct(inner.arrow))
        else:
            inner = descriptor.value_info
            stored = ValueStateDescriptor(name, ttl_struct(inner.arrow))
        self.inner: TypeInfo = inner
        self.stored = stored

    # -- incremental cleanup ----------------------------------------------------------------
    def purge(self, now: int) -> Callable[[Any], Any]:
        """What remains of one stored entry (value, list or map) at ``now``: ``None`` if none."""
        limit = now - self.ttl_ms  # expired when ttl_timestamp <= limit

        if self.kind is StateKind.LIST:

            def purge_list(stored: Any) -> Any:
                alive = [e for e in stored if e[TTL_TIMESTAMP] > limit]
                if len(alive) == len(stored):
                    return stored
                return alive or None

            return purge_list
        if self.kind is StateKind.MAP:

            def purge_map(stored: Any) -> Any:
                alive = {k: e for k, e in stored.items() if e[TTL_TIMESTAMP] > limit}
                if len(alive) == len(stored):
                    return stored
                return alive or None

            return purge_map

        def purge_value(stored: Any) -> Any:
            return stored if stored[TTL_TIMESTAMP] > limit else None

        return purge_value

    # -- snapshot rows ----------------------------------------------------------------------
    def to_snapshot(self, rows: pa.Table, *, now: int) -> pa.Table:
        """Stored rows (``value`` a struct) → snapshot rows (``value`` + ``ttl_timestamp``).

        Under ``CleanupStrategy.FULL_SNAPSHOT`` expired values (list elements, map entries) are
        left out.
        """
        drop_expired = self.config.cleanup is CleanupStrategy.FULL_SNAPSHOT
        limit = now - self.ttl_ms
        column = rows.column(VALUE).combine_chunks()
        if self.kind is StateKind.LIST:
            lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
            elements = column.flatten()
            values, stamps = elements.flatten()
            if drop_expired:
                keep = pc.greater(stamps, pa.scalar(limit, pa.int64()))
                parents = np.repeat(np.arange(len(lengths)), lengths)
                lengths = np.bincount(
                    parents[keep.to_numpy(zero_copy_only=False)], minlength=len(lengths)
                )
                values, stamps = values.filter(keep), stamps.filter(keep)
            offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]), pa.int32())
            out = rows.drop_columns([VALUE])
            out = out.append_column(
                pa.field(VALUE, pa.list_(self.inner.arrow)),
                pa.ListArray.from_arrays(offsets, values),
            )
            out = out.append_column(
                pa.field(TTL_TIMESTAMP, pa.list_(pa.int64()), nullable=False),
                pa.ListArray.from_arrays(offsets, stamps),
            )
            return out.filter(pa.array(lengths > 0)) if drop_expired else out
        values, stamps = column.flatten()
        out = rows.drop_columns([VALUE])
        out = out.append_column(pa.field(VALUE, self.inner.arrow), values)
        out = out.append_column(pa.field(TTL_TIMESTAMP, pa.int64(), nullable=False), stamps)
        if drop_expired:
            out = out.filter(pc.greater(stamps, pa.scalar(limit, pa.int64())))
        return out

    def from_snapshot(self, rows: pa.Table, *, now: int) -> pa.Table:
        """Snapshot rows → stored rows; without a ``ttl_timestamp`` column the clock starts now."""
        values = rows.column(VALUE).combine_chunks()
        has_stamps = TTL_TIMESTAMP in rows.column_names
        out = rows.drop_columns([c for c in (VALUE, TTL_TIMESTAMP) if c in rows.column_names])
        struct = ttl_struct(self.inner.arrow)
        try:
            if self.kind is StateKind.LIST:
                lengths = pc.fill_null(pc.list_value_length(values), 0)
                elements = values.flatten()
                if has_stamps:
                    stamps = rows.column(TTL_TIMESTAMP).combine_chunks().flatten()
                else:
                    stamps = pa.array(np.full(len(elements), now, np.int64))
                if len(stamps) != len(elements):
                    raise ValueError("ttl_timestamp lists differ in length from value lists")
                offsets = pa.array(
                    np.concatenate([[0], np.cumsum(lengths.to_numpy(zero_copy_only=False))]),
                    pa.int32(),
                )
                inner = pa.StructArray.from_arrays([elements, stamps], fields=list(struct))
                stored = pa.ListArray.from_arrays(offsets, inner)
                return out.append_column(pa.field(VALUE, pa.list_(struct)), stored)
            stamps = (
                rows.column(TTL_TIMESTAMP).combine_chunks()
                if has_stamps
                else pa.array(np.full(len(values), now, np.int64))
            )
            stored = pa.StructArray.from_arrays([values, stamps], fields=list(struct))
            return out.append_column(pa.field(VALUE, struct), stored)
        except (pa.ArrowInvalid, ValueError) as exc:
            raise CorruptSnapshotError(
                f"state {self.descriptor.name!r}: TTL snapshot rows are inconsistent: {exc}"
            ) from exc
