"""TTL cleanup: remove expired state entries as a new maintenance checkpoint, compact, VACUUM.

A state with TTL stores each entry's last-access time in its ``ttl_timestamp`` column (epoch
milliseconds; for a list state, a list parallel to the ``value`` list). An entry is expired when
``ttl_timestamp <= now - ttl`` (processing time, from a :class:`~statecore.ttl.TtlTimeProvider`).
Cleanup reads the latest checkpoint a key group at a time, drops expired entries (list elements;
a row whose list empties goes too), merges a key group's several small files into one, and commits
the changed key groups of each table as one MAINTENANCE checkpoint; then VACUUM deletes files no
retained checkpoint needs. The report says, per state and key group, what was expired and how
many rows and bytes it reclaimed.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statecore.catalog import Catalog, StateRecord, TableVersion
from statecore.checkpoint.lock import commit_maintenance_checkpoint, maintenance_lock
from statecore.checkpoint.points import RestorePoint, checkpoint_point
from statecore.checkpoint.recover import commit_metadata
from statecore.config import StatecoreConfig
from statecore.ops.materialize import materialize_changes
from statecore.ops.pending import roll_forward_first
from statecore.ops.retention import DEFAULT_VACUUM_GRACE, vacuum_job
from statecore.progress import Progress, silent
from statecore.snapshot.files import SnapshotFile, write_in_threads
from statecore.snapshot.rewrite import (
    TableLayout,
    VacuumResult,
    commit_files,
    partition_sizes,
    read_files,
    table_files,
    table_layout,
    write_partition_file,
)
from statecore.snapshot.table import Fence, TableFile
from statecore.ttl.storage import TTL_TIMESTAMP
from statecore.ttl.time import SystemTimeProvider, TtlTimeProvider

__all__ = ["CleanupReport", "KeyGroupCleanup", "expire_rows", "ttl_cleanup"]

VALUE = "value"
KEY_GROUP = "key_group"


@dataclass(frozen=True, kw_only=True)
class KeyGroupCleanup:
    """What cleanup did to one key group of one state."""

    operator: str
    state: str
    key_group: int
    expired: int  # entries: rows, or list elements for a list state
    rows_before: int
    rows_after: int
    bytes_before: int
    bytes_after: int
    files_before: int
    files_after: int

    @property
    def rows_reclaimed(self) -> int:
        return self.rows_before - self.rows_after

    @property
    def bytes_reclaimed(self) -> int:
        return self.bytes_before - self.bytes_after


@dataclass(frozen=True, kw_only=True)
class CleanupReport:
    """A cleanup run: the new checkpoint (``None`` when nothing changed or in a dry run)."""

    job: str
    dry_run: bool
    now_ms: int
    base_checkpoint: int | None
    checkpoint_id: int | None
    key_groups: tuple[KeyGroupCleanup, ...]
    vacuumed: tuple[VacuumResult, ...] = ()

    @property
    def expired(self) -> int:
        return sum(k.expired for k in self.key_groups)

    @property
    def rows_reclaimed(self) -> int:
        return sum(k.rows_reclaimed for k in self.key_groups)

    @property
    def bytes_reclaimed(self) -> int:
        return sum(k.bytes_reclaimed for k in self.key_groups)

    def rows(self) -> list[dict[str, Any]]:
        """One row per state and key group, for a table, CSV or JSON."""
        return [
            {**asdict(k), "rows_reclaimed": k.rows_reclaimed, "bytes_reclaimed": k.bytes_reclaimed}
            for k in self.key_groups
        ]

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-able values (an Airflow XCom)."""
        return {
            "job": self.job,
            "dry_run": self.dry_run,
            "now_ms": self.now_ms,
            "base_checkpoint": self.base_checkpoint,
            "checkpoint_id": self.checkpoint_id,
            "expired": self.expired,
            "rows_reclaimed": self.rows_reclaimed,
            "bytes_reclaimed": self.bytes_reclaimed,
            "key_groups": self.rows(),
            "vacuum": {
                "files": sum(len(v.files) for v in self.vacuumed),
                "bytes": sum(v.bytes for v in self.vacuumed),
            },
        }


def expire_rows(rows: pa.Table, limit: int) -> tuple[pa.Table, int]:
    """``rows`` without entries whose ``ttl_timestamp <= limit``; and how many entries went."""
    stamps = rows.column(TTL_TIMESTAMP).combine_chunks()
    if not pa.types.is_list(stamps.type):
        keep = pc.greater(stamps, pa.scalar(limit, stamps.type))
        kept = rows.filter(keep)
        return kept, rows.num_rows - kept.num_rows
    values = rows.column(VALUE).combine_chunks()
    flat = stamps.flatten()
    keep_elements = pc.greater(flat, pa.scalar(limit, flat.type))
    expired = len(flat) - pc.sum(keep_elements).as_py() if len(flat) else 0
    if not expired:
        return rows, 0
    lengths = pc.fill_null(pc.list_value_length(stamps), 0).to_numpy(zero_copy_only=False)
    parents = np.repeat(np.arange(len(lengths)), lengths)
    mask = keep_elements.to_numpy(zero_copy_only=False)
    new_lengths = np.bincount(parents[mask], minlength=len(lengths))
    offsets = pa.array(np.concatenate([[0], np.cumsum(new_lengths)]), pa.int32())
    new_values = pa.ListArray.from_arrays(
        offsets, values.flatten().filter(keep_elements), type=values.type
    )
    new_stamps = pa.ListArray.from_arrays(offsets, flat.filter(keep_elements), type=stamps.type)
    out = rows.set_column(rows.schema.get_field_index(VALUE), rows.schema.field(VALUE), new_values)
    out = out.set_column(
        out.schema.get_field_index(TTL_TIMESTAMP), out.schema.field(TTL_TIMESTAMP), new_stamps
    )
    return out.filter(pa.array(new_lengths > 0)), int(expired)


def _ttl_ms(state: StateRecord | None, layout: TableLayout) -> int | None:
    if state is None or not state.ttl or TTL_TIMESTAMP not in layout.rows_schema.names:
        return None
    return int(state.ttl["ttl_ms"])


@dataclass
class _TablePlan:
    table: TableVersion
    layout: TableLayout
    changed: dict[int, SnapshotFile | None]  # key group -> its new file (None: no rows left)
    report: list[KeyGroupCleanup]


def _plan_table(
    table: TableVersion,
    layout: TableLayout,
    ttl_ms: int | None,
    now: int,
    *,
    compact: bool,
    write: bool,
) -> _TablePlan:
    """Clean one table a key group at a time; with ``write``, each cleaned key group is written
    as a new (uncommitted) file from a few threads while the next ones are cleaned, so memory
    holds a few key groups at most."""
    by_group: dict[int, list[TableFile]] = defaultdict(list)
    for f in table_files(table.path, table.version):
        by_group[f.key_group].append(f)
    cleaned: list[tuple[int, list[TableFile], int, int]] = []  # files, rows left, expired

    def clean() -> Iterator[tuple[int, pa.Table]]:
        for key_group, files in sorted(by_group.items()):
            merge = compact and len(files) > 1
            if ttl_ms is None and not merge:
                continue
            parts = [rows for _, rows in read_files(table.path, files)]
            rows = pa.concat_tables(parts).combine_chunks() if len(parts) > 1 else parts[0]
            expired = 0
            if ttl_ms is not None:
                rows, expired = expire_rows(rows, now - ttl_ms)
            if not expired and not merge:
                continue
            cleaned.append((key_group, files, rows.num_rows, expired))
            if write and rows.num_rows:
                yield key_group, rows

    written = {
        f.key_group: f
        for f in write_in_threads(
            functools.partial(write_partition_file, table.path, layout, prefix="ttl"), clean()
        )
    }
    plan = _TablePlan(table, layout, {}, [])
    for key_group, files, rows_after, expired in cleaned:
        before, rows_before = sum(f.size for f in files), sum(f.rows for f in files)
        new = plan.changed[key_group] = written.get(key_group)
        after = new.size if new is not None else round(before * rows_after / max(1, rows_before))
        plan.report.append(
            KeyGroupCleanup(
                operator=table.operator,
                state=table.state,
                key_group=key_group,
                expired=expired,
                rows_before=rows_before,
                rows_after=rows_after,
                bytes_before=before,
                bytes_after=after,
                files_before=len(files),
                files_after=1 if rows_after else 0,
            )
        )
    return plan


def _commit_table(
    plan: _TablePlan, checkpoint_id: int, job: str, point: RestorePoint, fence: Fence
) -> TableVersion:
    table = plan.table
    version = commit_files(
        table.path,
        plan.layout,
        [f for f in plan.changed.values() if f is not None],
        replaced=set(plan.changed),
        base_version=table.version,
        app_id=f"{job}/{table.operator}/{table.state}",
        checkpoint_id=checkpoint_id,
        metadata=commit_metadata(point, table, checkpoint_id),
        fence=fence,
    )
    key_groups = partition_sizes(table.path, version)
    return replace(
        table,
        version=version,
        key_groups=key_groups,
        rows=sum(r for r, _ in key_groups.values()),
        bytes=sum(b for _, b in key_groups.values()),
    )


def ttl_cleanup(
    config: StatecoreConfig,
    catalog: Catalog,
    job: str,
    *,
    time_provider: TtlTimeProvider | None = None,
    compact: bool = True,
    vacuum_after: timedelta | None = DEFAULT_VACUUM_GRACE,
    dry_run: bool = False,
    progress: Progress = silent,
) -> CleanupReport:
    """Remove the expired entries of every TTL state of ``job``'s latest checkpoint and compact
    its key groups, as one MAINTENANCE checkpoint; then VACUUM files older than
    ``vacuum_after`` that no completed checkpoint needs (none when ``None``).

    A dry run reports what would be removed (its bytes after are estimated from the rows left)
    and changes nothing.
    """
    catalog.get_job(job)
    now = (time_provider or SystemTimeProvider()).current_timestamp()
    with maintenance_lock(catalog, job, "ttl-cleanup", wait=config.lease_wait) as lease:
        if not dry_run:  # pending output first; then expire rows of plain state tables only
            warehouse = config.warehouse
            roll_forward_first(
                "ttl-cleanup", catalog, job, lease.fence, warehouse=warehouse, progress=progress
            )
            materialize_changes(catalog, job, progress=progress, lease=lease)
        base = catalog.latest_checkpoint(job)
        if base is None:
            progress(f"ttl-cleanup {job}: no completed checkpoint, nothing to clean")
            return CleanupReport(
                job=job,
                dry_run=dry_run,
                now_ms=now,
                base_checkpoint=None,
                checkpoint_id=None,
                key_groups=(),
            )
        point = checkpoint_point(catalog, job, base.checkpoint_id)
        plans: list[_TablePlan] = []
        for i, table in enumerate(point.tables, 1):
            layout = table_layout(table.path, table.version)
            if layout.partition != KEY_GROUP:
                continue
            progress(
                f"ttl-cleanup {job}: table {i}/{len(point.tables)} {table.operator}/"
                f"{table.table_kind}/{table.state}"
            )
            plan = _plan_table(
                table,
                layout,
                _ttl_ms(point.state(table), layout),
                now,
                compact=compact,
                write=not dry_run,
            )
            if plan.changed:
                plans.append(plan)
        checkpoint_id = None
        if plans and not dry_run:

            def commit(new_id: int, fence: Fence) -> Sequence[TableVersion]:
                changed = {
                    (p.table.operator, p.table.table_kind, p.table.state): _commit_table(
                        p, new_id, job, point, fence
                    )
                    for p in plans
                }
                return [changed.get((t.operator, t.table_kind, t.state), t) for t in point.tables]

            record = commit_maintenance_checkpoint(
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
            checkpoint_id = record.checkpoint_id
        vacuumed: list[VacuumResult] = []
        if vacuum_after is not None and not dry_run:
            vacuumed = vacuum_job(config, catalog, job, older_than=vacuum_after, progress=progress)
        report = CleanupReport(
            job=job,
            dry_run=dry_run,
            now_ms=now,
            base_checkpoint=base.checkpoint_id,
            checkpoint_id=checkpoint_id,
            key_groups=tuple(k for p in plans for k in p.report),
            vacuumed=tuple(vacuumed),
        )
        progress(
            f"ttl-cleanup {job}: {report.expired} expired entries, {report.rows_reclaimed} "
            f"rows and {report.bytes_reclaimed} bytes reclaimed"
            + (f" as checkpoint {checkpoint_id}" if checkpoint_id else "")
        )
        return report
