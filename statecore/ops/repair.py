"""Repair state: erase a key everywhere, or run SQL ``UPDATE``/``DELETE`` over a copy of the state.

Neither ever touches a completed checkpoint: the repaired state is written as a NEW savepoint
(only the key groups that changed are rewritten, every other file is copied), which the job then
restores from (``keyed_process(restore_from=...)``, ``--from-savepoint``, ``statecore savepoints
restore``). A statement that would change a key or a partition column is refused before anything
is written (:class:`~statecore.errors.StateRepairError`): a key decides the key group its rows
live in, so keys are deleted, never renamed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from statecore.catalog import Catalog, TableVersion
from statecore.checkpoint.lock import maintenance_lock
from statecore.checkpoint.points import RestorePoint, resolve_point
from statecore.config import StatecoreConfig
from statecore.keygroups import assign_to_key_group
from statecore.ops.materialize import materialize_changes, require_materialized
from statecore.ops.savepoint import Rewrite, write_savepoint
from statecore.progress import Progress, silent
from statecore.query.apply import apply_statements
from statecore.query.lookup import parse_key
from statecore.snapshot.rewrite import TableLayout, read_files, table_files, table_layout

__all__ = ["RepairResult", "TableRepair", "apply_sql", "delete_key"]

KEY = "key"


@dataclass(frozen=True, kw_only=True)
class TableRepair:
    """One table the repair changed."""

    operator: str
    table_kind: str
    state: str
    partitions: tuple[int, ...]  # the key groups (subtasks) rewritten
    rows_before: int
    rows_after: int


@dataclass(frozen=True, kw_only=True)
class RepairResult:
    """The tables changed and the savepoint holding the repaired state (``None``: no change)."""

    job: str
    source: str
    changes: tuple[TableRepair, ...]
    savepoint: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "source": self.source,
            "savepoint": self.savepoint,
            "changes": [{**asdict(c), "partitions": list(c.partitions)} for c in self.changes],
        }


def _source(catalog: Catalog, job: str, source: str | None) -> RestorePoint:
    point = resolve_point(catalog, job, source)
    if point.job != job:
        point = point.for_job(job)
    return point


def _write(
    catalog: Catalog,
    config: StatecoreConfig,
    point: RestorePoint,
    plans: dict[tuple[str, str, str], tuple[Rewrite, TableRepair]],
    *,
    reason: str,
    name: str | None,
    target: str | None,
    progress: Progress,
) -> RepairResult:
    if not plans:
        progress(f"{reason} {point.job}: nothing changed; no savepoint written")
        return RepairResult(job=point.job, source=point.label, changes=(), savepoint=None)

    def rewrite(table: TableVersion, layout: TableLayout) -> Rewrite | None:
        found = plans.get((table.operator, table.table_kind, table.state))
        return None if found is None else found[0]

    saved = write_savepoint(
        catalog,
        config,
        point,
        reason=reason,
        name=name,
        target=target,
        rewrite=rewrite,
        progress=progress,
    )
    return RepairResult(
        job=point.job,
        source=point.label,
        savepoint=saved.savepoint,
        changes=tuple(repair for _, repair in plans.values()),
    )


def delete_key(
    config: StatecoreConfig,
    catalog: Catalog,
    job: str,
    key: str,
    *,
    source: str | None = None,
    name: str | None = None,
    target: str | None = None,
    progress: Progress = silent,
) -> RepairResult:
    """Erase ``key`` from every state and timer of ``job`` (a GDPR erasure) into a new
    savepoint; ``source`` is the checkpoint id, savepoint name or folder to start from (default:
    the latest checkpoint)."""
    with maintenance_lock(catalog, job, "state-delete", wait=config.lease_wait):
        point = _source(catalog, job, source)
        plans: dict[tuple[str, str, str], tuple[Rewrite, TableRepair]] = {}
        for table in point.tables:
            layout = table_layout(table.path, table.version)
            if layout.partition != "key_group" or KEY not in layout.rows_schema.names:
                continue
            value = parse_key(key, layout.rows_schema.field(KEY).type, job)
            key_group = assign_to_key_group(value, point.max_parallelism)
            files = [f for f in table_files(table.path, table.version) if f.key_group == key_group]
            parts = [rows for _, rows in read_files(table.path, files)]
            if not parts:
                continue
            rows = pa.concat_tables(parts)
            wanted = pa.scalar(value, rows.schema.field(KEY).type)
            kept = rows.filter(pc.invert(pc.equal(rows.column(KEY), wanted)))
            if kept.num_rows == rows.num_rows:
                continue
            progress(
                f"state delete {job}: {rows.num_rows - kept.num_rows} rows of "
                f"{table.state} in key group {key_group}"
            )
            plans[(table.operator, table.table_kind, table.state)] = (
                Rewrite(parts=[(key_group, kept)], replaced=frozenset({key_group})),
                TableRepair(
                    operator=table.operator,
                    table_kind=table.table_kind,
                    state=table.state,
                    partitions=(key_group,),
                    rows_before=table.rows,
                    rows_after=table.rows - rows.num_rows + kept.num_rows,
                ),
            )
        return _write(
            catalog,
            config,
            point,
            plans,
            reason="state-delete",
            name=name,
            target=target,
            progress=progress,
        )


def apply_sql(
    config: StatecoreConfig,
    catalog: Catalog,
    job: str,
    sql: str,
    *,
    source: str | None = None,
    name: str | None = None,
    target: str | None = None,
    progress: Progress = silent,
) -> RepairResult:
    """Run ``UPDATE``/``DELETE`` statements over a copy of ``job``'s state (views
    ``<job>.<state>``, as in ``statecore sql``, and in its sandbox: see
    :mod:`statecore.query.apply`) and write the result as a new savepoint."""
    with maintenance_lock(catalog, job, "state-apply", wait=config.lease_wait) as lease:
        if source is None:  # statements rewrite whole key groups of plain state tables
            materialize_changes(catalog, job, progress=progress, lease=lease)
        point = _source(catalog, job, source)
        require_materialized(point, "state apply")
        plans = {
            (c.table.operator, c.table.table_kind, c.table.state): (
                Rewrite(parts=list(c.parts), replaced=frozenset(c.partitions)),
                TableRepair(
                    operator=c.table.operator,
                    table_kind=c.table.table_kind,
                    state=c.table.state,
                    partitions=c.partitions,
                    rows_before=c.table.rows,
                    rows_after=c.rows_after,
                ),
            )
            for c in apply_statements(point, sql, progress=progress)
        }
        return _write(
            catalog,
            config,
            point,
            plans,
            reason="state-apply",
            name=name,
            target=target,
            progress=progress,
        )
