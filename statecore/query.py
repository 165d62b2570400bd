"""SQL over snapshots: DuckDB with its bundled Delta extension, one view per job and state.

Each table of a checkpoint or savepoint (keyed state, operator state, timers) is a view
``<job>.<state>`` over ``delta_scan(path, version => v)`` at the Delta version it names, so a
query sees exactly that checkpoint (time travel); the timers of an operator are ``<job>.timers``.
Where two tables share a name, the view is ``<job>."<operator>.<state>"``. The catalog's
checkpoints are the table ``statecore.checkpoints``, its savepoints ``statecore.savepoints``.
Queries are read-only: only ``SELECT`` statements run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
from duckdb_extensions import import_extension

from statecore.catalog import Catalog, CheckpointRecord, TableVersion
from statecore.errors import (
    CheckpointNotFoundError,
    ConfigError,
    JobNotFoundError,
    UnknownStateError,
)
from statecore.restore_point import (
    RestorePoint,
    checkpoint_point,
    load_savepoint,
    resolve_point,
)

__all__ = [
    "StateViews",
    "connect",
    "delta_scan",
    "ident",
    "open_point_views",
    "open_views",
    "run_sql",
    "view_names",
]

_READ_ONLY = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def ident(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the Delta extension loaded."""
    con = duckdb.connect()
    import_extension("delta", con=con)
    return con


def delta_scan(table: TableVersion) -> str:
    """The SQL table expression reading ``table`` at its version."""
    return f"delta_scan({_literal(table.path)}, version => {int(table.version)})"


def view_names(tables: Sequence[TableVersion]) -> list[str]:
    """The view name of each table: its state name, or ``<operator>.<state>`` when ambiguous."""
    names = [t.state for t in tables]
    return [t.state if names.count(t.state) == 1 else f"{t.operator}.{t.state}" for t in tables]


@dataclass(frozen=True)
class StateViews:
    """An in-memory DuckDB connection with the views of some checkpoints or savepoints."""

    connection: duckdb.DuckDBPyConnection
    points: dict[str, RestorePoint]
    views: tuple[str, ...]

    @property
    def checkpoints(self) -> dict[str, RestorePoint]:
        """The restore point shown for each job (kept for callers of the first version)."""
        return self.points

    def sql(self, query: str) -> pa.Table:
        """Run a read-only ``query``; its rows."""
        try:
            statements = duckdb.extract_statements(query)
        except duckdb.Error as exc:
            raise ConfigError(f"SQL error: {exc}") from exc
        for statement in statements:
            if statement.type not in _READ_ONLY:
                raise ConfigError(
                    f"statecore sql is read-only: {statement.type.name} is not allowed "
                    "(repair state with `statecore state apply`, which writes a new savepoint)"
                )
        if not statements:
            raise ConfigError("the query holds no statement")
        try:
            return self.connection.sql(query).to_arrow_table()
        except AttributeError:
            raise ConfigError(f"the statement returns no rows: {query!r}") from None
        except duckdb.CatalogException as exc:
            raise UnknownStateError(
                f"{exc}; the views are: {', '.join(self.views) or 'none'} and "
                "statecore.checkpoints, statecore.savepoints"
            ) from exc
        except duckdb.Error as exc:
            raise ConfigError(f"SQL error: {exc} (views: {', '.join(self.views)})") from exc

    def close(self) -> None:
        self.connection.close()


def _add_views(con: duckdb.DuckDBPyConnection, point: RestorePoint) -> list[str]:
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {ident(point.job)}")
    views = []
    for table, view in zip(point.tables, view_names(point.tables)):
        con.execute(f"CREATE OR REPLACE VIEW {ident(point.job)}.{ident(view)} AS "
                    f"SELECT * FROM {delta_scan(table)}")
        views.append(f"{point.job}.{view}")
    return views


def _register(con: duckdb.DuckDBPyConnection, name: str, rows: list[dict[str, Any]],
              empty: dict[str, pa.DataType]) -> None:
    table = pa.Table.from_pylist(rows) if rows else pa.table(
        {column: pa.array([], t) for column, t in empty.items()})
    con.register(f"_{name}", table)
    con.execute(f"CREATE VIEW statecore.{name} AS SELECT * FROM _{name}")


def open_point_views(points: Sequence[RestorePoint], catalog: Catalog | None = None
                     ) -> StateViews:
    """Views of every table of ``points`` (one per job), plus the catalog's listings."""
    con = connect()
    views: list[str] = []
    for point in points:
        views += _add_views(con, point)
    con.execute("CREATE SCHEMA IF NOT EXISTS statecore")
    checkpoints: list[dict[str, Any]] = []
    savepoints: list[dict[str, Any]] = []
    if catalog is not None:
        for job in catalog.list_jobs():
            checkpoints += [_checkpoint_row(c) for c in catalog.list_checkpoints(job.name)]
        savepoints = [{"job": s.job, "name": s.name, "reason": s.reason,
                       "source_checkpoint": s.source_checkpoint, "parallelism": s.parallelism,
                       "max_parallelism": s.max_parallelism, "rows": s.rows, "bytes": s.bytes,
                       "created_at": s.created_at, "path": s.path}
                      for s in catalog.list_savepoints()]
    _register(con, "checkpoints", checkpoints, {"job": pa.string(), "checkpoint_id": pa.int64()})
    _register(con, "savepoints", savepoints, {"job": pa.string(), "name": pa.string()})
    return StateViews(con, {p.job: p for p in points}, tuple(views))


def _checkpoint_row(c: CheckpointRecord) -> dict[str, Any]:
    return {"job": c.job, "checkpoint_id": c.checkpoint_id, "kind": c.kind.name,
            "status": c.status.name, "parallelism": c.parallelism,
            "max_parallelism": c.max_parallelism, "rows": c.total_rows, "bytes": c.total_bytes,
            "completed_at": c.completed_at}


def open_views(
    catalog: Catalog, *, jobs: Sequence[str] | None = None, checkpoint_id: int | None = None
) -> StateViews:
    """Views for ``jobs`` (all when ``None``) at their latest or the given checkpoint."""
    known = [j.name for j in catalog.list_jobs()]
    if jobs is None:
        jobs = known
    for job in jobs:
        catalog.get_job(job)  # JobNotFoundError names the known jobs
    if checkpoint_id is not None and len(jobs) != 1:
        raise ConfigError(f"--checkpoint needs exactly one job; known jobs: {known}")
    points = []
    for job in jobs:
        try:
            points.append(checkpoint_point(catalog, job, checkpoint_id))
        except CheckpointNotFoundError:
            if checkpoint_id is not None:
                raise
    return open_point_views(points, catalog)


def run_sql(
    catalog: Catalog, query: str, *, job: str | None = None, checkpoint_id: int | None = None,
    savepoint: str | None = None,
) -> pa.Table:
    """Run ``query`` over the views of ``job`` (or every job) at a checkpoint, or over a
    savepoint (a name of ``job``'s or a folder)."""
    if job is not None and job not in {j.name for j in catalog.list_jobs()} and \
            not (savepoint and "/" in savepoint):
        catalog.get_job(job)  # raises JobNotFoundError
    if savepoint is not None:
        if checkpoint_id is not None:
            raise ConfigError("give --checkpoint or --savepoint, not both")
        if "/" not in savepoint and job is None:
            raise ConfigError(f"savepoint {savepoint!r} is a name: give --job too (or a folder)")
        point = load_savepoint(savepoint) if "/" in savepoint else \
            resolve_point(catalog, job or "", savepoint)
        views = open_point_views([point], catalog)
    else:
        if job is None and checkpoint_id is not None:
            jobs = [j.name for j in catalog.list_jobs()]
            if len(jobs) != 1:
                raise ConfigError(f"--checkpoint needs --job (known jobs: {jobs})")
            job = jobs[0]
        if job is None and not catalog.list_jobs():
            raise JobNotFoundError("no job has been checkpointed yet; run a job first")
        views = open_views(catalog, jobs=[job] if job else None, checkpoint_id=checkpoint_id)
    try:
        return views.sql(query)
    finally:
        views.close()
