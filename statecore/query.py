"""SQL over snapshots: DuckDB with its bundled Delta extension, one view per job and state.

Each state of a checkpoint is a view ``<job>.<state>`` over ``delta_scan(path, version => v)`` at
the Delta version the checkpoint names, so a query sees exactly that checkpoint (time travel). The
catalog's checkpoints are the table ``statecore.checkpoints``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import pyarrow as pa
from duckdb_extensions import import_extension

from statecore.catalog import Catalog, CheckpointRecord, CheckpointStatus
from statecore.errors import (
    CheckpointNotFoundError,
    ConfigError,
    JobNotFoundError,
    UnknownStateError,
)

__all__ = ["StateViews", "open_views", "run_sql"]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class StateViews:
    """An in-memory DuckDB connection with the views of some checkpoints."""

    connection: duckdb.DuckDBPyConnection
    checkpoints: dict[str, CheckpointRecord]
    views: tuple[str, ...]

    def sql(self, query: str) -> pa.Table:
        try:
            return self.connection.sql(query).to_arrow_table()
        except AttributeError:
            raise ConfigError(f"the statement returns no rows: {query!r}") from None
        except duckdb.CatalogException as exc:
            raise UnknownStateError(
                f"{exc}; the views are: {', '.join(self.views) or 'none'} and "
                "statecore.checkpoints"
            ) from exc
        except duckdb.Error as exc:
            raise ConfigError(f"SQL error: {exc} (views: {', '.join(self.views)})") from exc


def _checkpoint(catalog: Catalog, job: str, checkpoint_id: int | None) -> CheckpointRecord:
    if checkpoint_id is None:
        latest = catalog.latest_checkpoint(job)
        if latest is None:
            raise CheckpointNotFoundError(f"job {job!r} has no completed checkpoint yet")
        return latest
    record = catalog.get_checkpoint(job, checkpoint_id)
    if record.status is not CheckpointStatus.COMPLETED:
        raise CheckpointNotFoundError(
            f"checkpoint {checkpoint_id} of job {job!r} is {record.status.name}, not complete"
        )
    return record


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
    con = duckdb.connect()
    import_extension("delta", con=con)
    checkpoints: dict[str, CheckpointRecord] = {}
    views: list[str] = []
    listing: list[dict[str, object]] = []
    for job in jobs:
        for c in catalog.list_checkpoints(job):
            listing.append({"job": job, "checkpoint_id": c.checkpoint_id, "kind": c.kind.name,
                            "status": c.status.name, "parallelism": c.parallelism,
                            "max_parallelism": c.max_parallelism, "rows": c.total_rows,
                            "bytes": c.total_bytes, "completed_at": c.completed_at})
        try:
            record = _checkpoint(catalog, job, checkpoint_id)
        except CheckpointNotFoundError:
            if checkpoint_id is not None:
                raise
            continue
        checkpoints[job] = record
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {_ident(job)}")
        names = [t.state for t in record.tables]
        for t in record.tables:
            view = t.state if names.count(t.state) == 1 else f"{t.operator}.{t.state}"
            con.execute(
                f"CREATE VIEW {_ident(job)}.{_ident(view)} AS SELECT * FROM "
                f"delta_scan({_literal(t.path)}, version => {int(t.version)})"
            )
            views.append(f"{job}.{view}")
    con.execute("CREATE SCHEMA IF NOT EXISTS statecore")
    listing_table = pa.Table.from_pylist(listing) if listing else pa.table(
        {"job": pa.array([], pa.string()), "checkpoint_id": pa.array([], pa.int64())})
    con.register("_checkpoints", listing_table)
    con.execute("CREATE VIEW statecore.checkpoints AS SELECT * FROM _checkpoints")
    return StateViews(con, checkpoints, tuple(views))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def run_sql(
    catalog: Catalog, query: str, *, job: str | None = None, checkpoint_id: int | None = None
) -> pa.Table:
    """Run ``query`` over the views of ``job`` (or every job) at a checkpoint."""
    if job is not None and job not in {j.name for j in catalog.list_jobs()}:
        catalog.get_job(job)  # raises JobNotFoundError
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
        views.connection.close()
