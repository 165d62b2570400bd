"""What SQL over state shows, whatever the engine: which restore points a query reads, the view
of each of their tables (its name, its Delta version, the pending changes merged into it), and
the catalog's listings.

Spark SQL (:mod:`statecore.spark.sql`) builds its views from this plan, and so shows the views
of DuckDB's (:mod:`statecore.query.sql`, the default engine) with the same names at the same
Delta versions:

- ``<job>.<state>`` for each table of a point (``<job>."<operator>.<state>"`` where two share a
  state name), the timers of an operator as ``<job>.timers``; a keyed state with a changes table
  (changelog checkpoints) shows its materialized rows with the pending changes applied: the rows
  of a key's latest change replace its rows, a tombstone deletes them.
- ``statecore.checkpoints``, ``statecore.savepoints``, ``statecore.state_latency``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from statecore.catalog import Catalog, CheckpointRecord, TableVersion
from statecore.checkpoint.points import (
    RestorePoint,
    checkpoint_point,
    load_savepoint,
    resolve_point,
)
from statecore.errors import CheckpointNotFoundError, ConfigError, JobNotFoundError
from statecore.snapshot.changelog import CHANGES

__all__ = [
    "CATALOG_SCHEMA",
    "Listing",
    "StateView",
    "catalog_listings",
    "checkpoint_points",
    "query_points",
    "state_views_of",
    "view_names",
]

CATALOG_SCHEMA = "statecore"
"""The schema of the catalog's listings: ``statecore.checkpoints`` and the like."""


def view_names(tables: Sequence[TableVersion]) -> list[str]:
    """The view name of each table: its state name, or ``<operator>.<state>`` when ambiguous."""
    names = [t.state for t in tables]
    return [t.state if names.count(t.state) == 1 else f"{t.operator}.{t.state}" for t in tables]


@dataclass(frozen=True)
class StateView:
    """The view ``<schema>.<name>`` over ``table`` at its version, with the ``pending`` changes
    table (at its version) applied when the state has one."""

    schema: str
    name: str
    table: TableVersion
    pending: TableVersion | None

    @property
    def qualified(self) -> str:
        """``job.state``, as the views are listed in messages."""
        return f"{self.schema}.{self.name}"


def state_views_of(point: RestorePoint) -> list[StateView]:
    """The views of ``point``'s tables (a changes table is merged into its state's view)."""
    changes = {(t.operator, t.state): t for t in point.tables if t.table_kind == CHANGES}
    tables = [t for t in point.tables if t.table_kind != CHANGES]
    return [
        StateView(
            point.job,
            name,
            table,
            changes.get((table.operator, table.state)) if table.table_kind == "keyed" else None,
        )
        for table, name in zip(tables, view_names(tables))
    ]


def checkpoint_points(
    catalog: Catalog, jobs: Sequence[str] | None = None, checkpoint_id: int | None = None
) -> list[RestorePoint]:
    """The points of ``jobs`` (all when ``None``) at their latest or the given checkpoint; a
    job without a completed checkpoint is left out unless ``checkpoint_id`` is given."""
    if jobs is None:
        jobs = [j.name for j in catalog.list_jobs()]
    for job in jobs:
        catalog.get_job(job)  # JobNotFoundError names the known jobs
    if checkpoint_id is not None and len(jobs) != 1:
        known = [j.name for j in catalog.list_jobs()]
        raise ConfigError(f"--checkpoint needs exactly one job; known jobs: {known}")
    points = []
    for job in jobs:
        try:
            points.append(checkpoint_point(catalog, job, checkpoint_id))
        except CheckpointNotFoundError:
            if checkpoint_id is not None:
                raise
    return points


def query_points(
    catalog: Catalog,
    *,
    job: str | None = None,
    checkpoint_id: int | None = None,
    savepoint: str | None = None,
) -> list[RestorePoint]:
    """The points ``statecore sql`` reads: ``job``'s (or every job's) at a checkpoint (the
    latest by default), or a savepoint (a name of ``job``'s or a folder)."""
    if job is not None and not (savepoint and "/" in savepoint):
        catalog.get_job(job)  # JobNotFoundError names the known jobs
    if savepoint is not None:
        if checkpoint_id is not None:
            raise ConfigError("give --checkpoint or --savepoint, not both")
        if "/" not in savepoint and job is None:
            raise ConfigError(f"savepoint {savepoint!r} is a name: give --job too (or a folder)")
        return [
            load_savepoint(savepoint)
            if "/" in savepoint
            else resolve_point(catalog, job or "", savepoint)
        ]
    if job is None and checkpoint_id is not None:
        jobs = [j.name for j in catalog.list_jobs()]
        if len(jobs) != 1:
            raise ConfigError(f"--checkpoint needs --job (known jobs: {jobs})")
        job = jobs[0]
    if job is None and not catalog.list_jobs():
        raise JobNotFoundError("no job has been checkpointed yet; run a job first")
    return checkpoint_points(catalog, [job] if job else None, checkpoint_id)


@dataclass(frozen=True)
class Listing:
    """One of the catalog's listings: ``statecore.<name>``, its rows as an Arrow table."""

    name: str
    rows: pa.Table


_LATENCY_COLUMNS = {
    "job": pa.string(),
    "checkpoint_id": pa.int64(),
    "state": pa.string(),
    "access": pa.string(),
    "samples": pa.int64(),
    "p50_us": pa.float64(),
    "p95_us": pa.float64(),
    "p99_us": pa.float64(),
}


def _table(rows: list[dict[str, Any]], empty: dict[str, pa.DataType]) -> pa.Table:
    if rows:
        return pa.Table.from_pylist(rows)
    return pa.table({column: pa.array([], t) for column, t in empty.items()})


def _latency_rows(checkpoint: CheckpointRecord) -> list[dict[str, Any]]:
    """``statecore.state_latency``: the checkpoint's latency percentiles per state and access."""
    return [
        {
            "job": checkpoint.job,
            "checkpoint_id": checkpoint.checkpoint_id,
            "state": state,
            "access": access,
            **{k: p[k] for k in ("samples", "p50_us", "p95_us", "p99_us")},
        }
        for state, accesses in checkpoint.metrics.get("latency", {}).items()
        for access, p in accesses.items()
    ]


def _checkpoint_row(c: CheckpointRecord) -> dict[str, Any]:
    return {
        "job": c.job,
        "checkpoint_id": c.checkpoint_id,
        "kind": c.kind.name,
        "status": c.status.name,
        "parallelism": c.parallelism,
        "max_parallelism": c.max_parallelism,
        "rows": c.total_rows,
        "bytes": c.total_bytes,
        "completed_at": c.completed_at,
    }


def catalog_listings(catalog: Catalog | None) -> list[Listing]:
    """``checkpoints``, ``savepoints`` and ``state_latency`` of ``catalog`` (empty without one)."""
    checkpoints: list[dict[str, Any]] = []
    savepoints: list[dict[str, Any]] = []
    latency: list[dict[str, Any]] = []
    if catalog is not None:
        for job in catalog.list_jobs():
            for c in catalog.list_checkpoints(job.name):
                checkpoints.append(_checkpoint_row(c))
                latency += _latency_rows(c)
        savepoints = [
            {
                "job": s.job,
                "name": s.name,
                "reason": s.reason,
                "source_checkpoint": s.source_checkpoint,
                "parallelism": s.parallelism,
                "max_parallelism": s.max_parallelism,
                "rows": s.rows,
                "bytes": s.bytes,
                "created_at": s.created_at,
                "path": s.path,
            }
            for s in catalog.list_savepoints()
        ]
    ids = {"job": pa.string(), "checkpoint_id": pa.int64()}
    return [
        Listing("checkpoints", _table(checkpoints, ids)),
        Listing("savepoints", _table(savepoints, {"job": pa.string(), "name": pa.string()})),
        Listing("state_latency", _table(latency, _LATENCY_COLUMNS)),
    ]
