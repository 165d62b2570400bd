"""Changelog checkpoints: per-key-group change files beside the state tables (FLIP-158).

With changelog checkpoints a checkpoint does not rewrite the key groups it touched: it appends,
per state and key group, a *change file* with the full rows of every key that changed (all its
namespaces and map entries) and a *tombstone* for every key left without rows. Change files go to
a second Delta table per state, the state's **changes table**
(``<warehouse>/<job>/<operator>/changes/<state>``, beside ``.../keyed/<state>``), partitioned by
key group like the state table, one commit per checkpoint, fenced and named by the checkpoint as
every statecore commit. The catalog records both tables' versions per checkpoint (table kind
``changes``).

Every few checkpoints, or when a key group's pending changes outgrow a share of its rows
(:class:`ChangelogConfig`), the task *materializes* the key group: it writes the key group whole
into the state table and the committer removes that key group's change files, in the same
checkpoint. Once every key group is materialized the changes table is empty and the state table
alone is the state, plain Delta for any reader.

Reading state is :func:`apply_changes`: for each key with changes, the rows of its latest change
replace its materialized rows (a tombstone removes them).

>>> import pyarrow as pa
>>> rows = pa.table({"key": ["a", "b"], "namespace": ["", ""], "value": [1, 2]})
>>> changes = change_rows(
...     pa.table({"key": ["b"], "namespace": [""], "value": [20]}), ["a"], checkpoint_id=3)
>>> apply_changes(rows, changes).to_pylist()
[{'key': 'b', 'namespace': '', 'value': 20}]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from statecore.errors import ConfigError, CorruptSnapshotError

__all__ = [
    "CHANGE_CHECKPOINT",
    "CHANGES",
    "TOMBSTONE",
    "ChangelogConfig",
    "apply_changes",
    "change_rows",
    "changes_schema",
]

CHANGES = "changes"
"""The table kind (and folder) of the changes tables."""

CHANGE_CHECKPOINT = "change_checkpoint"
"""The column of a change row naming the checkpoint that wrote it (later ones win)."""

TOMBSTONE = "tombstone"
"""The column marking a change row that deletes every row of its key."""


@dataclass(frozen=True, kw_only=True)
class ChangelogConfig:
    """When a key group's pending changes are materialized into the state table.

    A key group touched by a checkpoint is rewritten whole (instead of getting one more change
    file) when it already has ``materialize_every - 1`` pending change files, or when its pending
    change rows and the keys changed now exceed ``max_change_ratio`` times its materialized rows
    (:meth:`materializes`). Larger values write less
    per checkpoint (bytes follow the changed keys) and leave more for restores and readers to
    merge.

    >>> ChangelogConfig().materialize_every, ChangelogConfig().max_change_ratio
    (50, 0.5)
    """

    materialize_every: int = 50
    max_change_ratio: float = 0.5

    def __post_init__(self) -> None:
        if self.materialize_every < 1:
            raise ConfigError(
                f"changelog: materialize_every must be at least 1, not {self.materialize_every}"
            )
        if not self.max_change_ratio > 0:
            raise ConfigError(
                f"changelog: max_change_ratio must be positive, not {self.max_change_ratio}"
            )

    @classmethod
    def of(cls, value: bool | ChangelogConfig | None) -> ChangelogConfig | None:
        """The config a ``changelog=`` argument means (``True``: the defaults; falsy: off)."""
        if isinstance(value, ChangelogConfig):
            return value
        if value is True:
            return cls()
        if value in (None, False):
            return None
        raise ConfigError(f"changelog= takes True, False or a ChangelogConfig, not {value!r}")

    def materializes(
        self, *, pending_files: int, pending_rows: int, changed_keys: int, state_rows: int
    ) -> bool:
        """Whether a key group is rewritten whole this time: it has ``pending_files`` change
        files with ``pending_rows`` rows, ``changed_keys`` keys changed now, and
        ``state_rows`` materialized rows. A key group with no materialized rows yet is written
        whole (its first checkpoint writes it as a snapshot, not as changes).

        >>> config = ChangelogConfig(materialize_every=3, max_change_ratio=0.5)
        >>> config.materializes(pending_files=1, pending_rows=10, changed_keys=5, state_rows=100)
        False
        >>> config.materializes(pending_files=2, pending_rows=10, changed_keys=5, state_rows=100)
        True
        >>> config.materializes(pending_files=1, pending_rows=40, changed_keys=20, state_rows=100)
        True
        """
        return (
            pending_files + 1 >= self.materialize_every
            or pending_rows + changed_keys > self.max_change_ratio * state_rows
        )


def changes_schema(rows_schema: pa.Schema) -> pa.Schema:
    """The rows of a changes table: a state's snapshot columns (nullable but the key, as a
    tombstone has only its key), the checkpoint of the change and the tombstone flag."""
    fields = [f if f.name == "key" else f.with_nullable(True) for f in rows_schema]
    fields += [
        pa.field(CHANGE_CHECKPOINT, pa.int64(), nullable=False),
        pa.field(TOMBSTONE, pa.bool_(), nullable=False),
    ]
    return pa.schema(fields)


def change_rows(rows: pa.Table, tombstones: Sequence[Any], *, checkpoint_id: int) -> pa.Table:
    """A change file's rows: the changed keys' ``rows`` and a tombstone per key of
    ``tombstones``, written by checkpoint ``checkpoint_id``."""
    schema = changes_schema(rows.schema)
    upserts = rows.cast(pa.schema([schema.field(i) for i in range(len(rows.schema))]))
    n, m = upserts.num_rows, len(tombstones)
    upserts = upserts.append_column(
        schema.field(CHANGE_CHECKPOINT), pa.repeat(pa.scalar(checkpoint_id, pa.int64()), n)
    ).append_column(schema.field(TOMBSTONE), pa.repeat(pa.scalar(False), n))
    if not m:
        return upserts
    deletes = {
        f.name: pa.nulls(m, f.type)
        for f in schema
        if f.name not in ("key", CHANGE_CHECKPOINT, TOMBSTONE)
    }
    deletes["key"] = pa.array(list(tombstones), schema.field("key").type)
    deletes[CHANGE_CHECKPOINT] = pa.repeat(pa.scalar(checkpoint_id, pa.int64()), m)
    deletes[TOMBSTONE] = pa.repeat(pa.scalar(True), m)
    return pa.concat_tables(
        [upserts, pa.table({f.name: deletes[f.name] for f in schema}, schema=schema)]
    )


def apply_changes(rows: pa.Table, changes: pa.Table | Sequence[pa.Table]) -> pa.Table:
    """``rows`` (materialized, snapshot schema) with ``changes`` applied: every key with
    changes has the rows of its latest change instead (none after a tombstone)."""
    if not isinstance(changes, pa.Table):
        if not changes:
            return rows
        changes = pa.concat_tables(changes, promote_options="default")
    if changes.num_rows == 0:
        return rows
    last = changes.group_by("key").aggregate([(CHANGE_CHECKPOINT, "max")])
    changed_keys = last.column("key")
    latest = pc.take(
        last.column(f"{CHANGE_CHECKPOINT}_max"),
        pc.index_in(changes.column("key"), value_set=changed_keys),
    )
    current = pc.and_(
        pc.equal(changes.column(CHANGE_CHECKPOINT), latest),
        pc.invert(changes.column(TOMBSTONE)),
    )
    kept = rows.filter(pc.invert(pc.is_in(rows.column("key"), value_set=changed_keys)))
    try:
        upserts = changes.filter(current).select(rows.schema.names).cast(rows.schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as exc:
        raise CorruptSnapshotError(
            f"change rows do not match the state's rows {rows.schema.names}: {exc}"
        ) from exc
    return pa.concat_tables([kept, upserts])
