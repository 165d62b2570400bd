"""Materialize a job's pending changes (changelog checkpoints) into its state tables.

Operations that rewrite or copy tables at the file level (TTL cleanup, rescale, repair) work on
plain state tables: they first call :func:`materialize_changes`, which, under the job's lease,
applies every pending change file to its key group's rows, writes the key groups whole into the
state tables and empties the changes tables, as one MAINTENANCE checkpoint (nothing when no
change is pending). Afterwards each state table alone is the state, for any Delta reader.
Savepoints copy the changes tables with the state tables, and SQL views merge them, so neither
needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pyarrow as pa

from statecore.catalog import Catalog, CheckpointRecord, TableVersion
from statecore.checkpoint.lock import JobLease, commit_maintenance_checkpoint, maintenance_lock
from statecore.checkpoint.points import RestorePoint, checkpoint_point
from statecore.checkpoint.recover import commit_metadata
from statecore.errors import ConfigError
from statecore.progress import Progress, silent
from statecore.snapshot.changelog import CHANGES, apply_changes
from statecore.snapshot.files import SnapshotFile
from statecore.snapshot.rewrite import (
    commit_files,
    partition_sizes,
    read_files,
    table_files,
    table_layout,
    write_partition_file,
)
from statecore.snapshot.table import Fence, TableFile

__all__ = ["materialize_changes", "pending_changes", "require_materialized"]


def pending_changes(point: RestorePoint) -> list[TableVersion]:
    """The changes tables of ``point`` that still hold change files."""
    return [t for t in point.tables if t.table_kind == CHANGES and t.rows]


def require_materialized(point: RestorePoint, operation: str) -> None:
    """Refuse ``operation`` on a restore point with pending changes (it works on plain state
    tables); the latest checkpoint is materialized by :func:`materialize_changes`."""
    pending = pending_changes(point)
    if pending:
        raise ConfigError(
            f"{operation}: {point.label} has pending changelog changes for the states "
            f"{sorted({t.state for t in pending})}; restore it and run statecore materialize "
            "(materialize_changes) first, or start from the latest checkpoint"
        )


def _versioned(table: TableVersion, version: int) -> TableVersion:
    sizes = partition_sizes(table.path, version)
    return replace(
        table,
        version=version,
        key_groups=sizes,
        rows=sum(r for r, _ in sizes.values()),
        bytes=sum(b for _, b in sizes.values()),
    )


def _materialize_table(
    point: RestorePoint,
    state: TableVersion,
    changes: TableVersion,
    checkpoint_id: int,
    job: str,
    fence: Fence,
) -> tuple[TableVersion, TableVersion]:
    layout = table_layout(state.path, state.version)
    by_kg: dict[int, list[TableFile]] = {}
    for f in table_files(state.path, state.version):
        by_kg.setdefault(f.key_group, []).append(f)
    pending: dict[int, list[TableFile]] = {}
    for f in table_files(changes.path, changes.version):
        pending.setdefault(f.key_group, []).append(f)
    written: list[SnapshotFile] = []
    for kg in sorted(pending):
        parts = [rows for _, rows in read_files(state.path, by_kg.get(kg, []))]
        rows = (
            pa.concat_tables(parts, promote_options="default")
            if parts
            else layout.rows_schema.empty_table()
        )
        merged = apply_changes(rows, [r for _, r in read_files(changes.path, pending[kg])])
        if merged.num_rows:
            written.append(
                write_partition_file(
                    state.path, layout, kg, merged, prefix=f"materialized-{checkpoint_id}"
                )
            )
    app_id = f"{job}/{state.operator}/{state.state}"
    state_version = commit_files(
        state.path,
        layout,
        written,
        replaced=set(pending),
        base_version=state.version,
        app_id=app_id,
        checkpoint_id=checkpoint_id,
        metadata=commit_metadata(point, state, checkpoint_id),
        fence=fence,
    )
    changes_version = commit_files(
        changes.path,
        table_layout(changes.path, changes.version),
        [],
        replaced=set(pending),
        base_version=changes.version,
        app_id=app_id,
        checkpoint_id=checkpoint_id,
        metadata=commit_metadata(point, changes, checkpoint_id),
        fence=fence,
    )
    return _versioned(state, state_version), _versioned(changes, changes_version)


def materialize_changes(
    catalog: Catalog, job: str, *, progress: Progress = silent, lease: JobLease | None = None
) -> CheckpointRecord | None:
    """Apply every pending change of ``job``'s latest checkpoint to its state tables, as a
    MAINTENANCE checkpoint; that checkpoint, or ``None`` when nothing was pending.

    ``lease``: the job's lease, which the caller holds already (an operation that materializes
    first); without it, the job's lease is taken for the operation."""
    if lease is None:
        with maintenance_lock(catalog, job, "materialize") as held:
            return materialize_changes(catalog, job, progress=progress, lease=held)
    base = catalog.latest_checkpoint(job)
    if base is None:
        return None
    point = checkpoint_point(catalog, job, base.checkpoint_id)
    pending = pending_changes(point)
    if not pending:
        return None
    states = {(t.operator, t.state): t for t in point.tables if t.table_kind == "keyed"}

    def commit(checkpoint_id: int, fence: Fence) -> Sequence[TableVersion]:
        new: dict[tuple[str, str, str], TableVersion] = {}
        for i, changes in enumerate(pending, 1):
            progress(f"materialize {job}: {i}/{len(pending)} {changes.operator}/{changes.state}")
            state = states[changes.operator, changes.state]
            state_table, changes_table = _materialize_table(
                point, state, changes, checkpoint_id, job, fence
            )
            new[state.operator, "keyed", state.state] = state_table
            new[changes.operator, CHANGES, changes.state] = changes_table
        return [new.get((t.operator, t.table_kind, t.state), t) for t in point.tables]

    return commit_maintenance_checkpoint(
        catalog,
        job,
        lease=lease,
        base=base,
        parallelism=base.parallelism,
        max_parallelism=base.max_parallelism,
        commit=commit,
        watermark=base.watermark,
        input_identity=base.input_identity,
    )
