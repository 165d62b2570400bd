"""The catalog as JSON-able rows, for a page that shows it (the statecore page in Airflow's UI).

Each function reads the catalog once and returns plain dicts and lists (strings, numbers,
``None``; timestamps as ISO 8601 UTC strings), so a web layer only renders them:

- :func:`jobs_overview`: every job, its parallelism, latest checkpoint and lease holder
  (:func:`job_overview`: one job's);
- :func:`checkpoints_overview`: a job's checkpoints with status, timings, sizes and, when the
  catalog has them, watermark, restore metrics and latency percentiles;
- :func:`checkpoint_detail`: one checkpoint, with the rows and bytes of every key group of every
  state (what the page draws as a chart);
- :func:`pending_outputs_overview`: the output of a job's completed checkpoints that is not in
  its tables yet, since when and why (:mod:`statecore.ops.pending`);
- :func:`savepoints_overview`: the savepoints;
- :func:`lookup_row`: a point lookup (:func:`statecore.query.lookup`) from form fields;
- :func:`link_runs`: which checkpoint each Airflow DAG run completed.

Fields that not every catalog has yet (a checkpoint's ``watermark``) are read defensively: the
row says ``None`` rather than failing.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from statecore.backends.timers import MAX_WATERMARK, MIN_WATERMARK
from statecore.catalog import (
    Catalog,
    CheckpointRecord,
    CheckpointStatus,
    JobRecord,
    SavepointRecord,
)
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.ops.pending import pending_output_status
from statecore.query.lookup import lookup

__all__ = [
    "DagRunRef",
    "checkpoint_detail",
    "checkpoint_row",
    "checkpoints_overview",
    "job_overview",
    "jobs_overview",
    "link_runs",
    "lookup_row",
    "pending_outputs_overview",
    "plain",
    "savepoints_overview",
]

_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


def plain(value: Any) -> Any:
    """``value`` as JSON can hold it: timestamps as ISO strings, bytes as base64 (prefixed
    ``base64:``), decimals as numbers, containers recursively, anything else as text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes):
        return "base64:" + base64.b64encode(value).decode()
    if isinstance(value, Mapping):
        return {str(plain(k)): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    return str(value)


def jobs_overview(catalog: Catalog) -> list[dict[str, Any]]:
    """Every job: name, parallelism, max parallelism, its latest completed checkpoint (id and
    completion time) and who holds its lease (a run or an operation), by name."""
    jobs = sorted(catalog.list_jobs(), key=lambda j: j.name)
    return [_job_row(catalog, job) for job in jobs]


def job_overview(catalog: Catalog, job: str) -> dict[str, Any]:
    """The row of :func:`jobs_overview` of ``job``; :class:`~statecore.errors.JobNotFoundError`
    if the catalog does not know it."""
    return _job_row(catalog, catalog.get_job(job))


def _job_row(catalog: Catalog, job: JobRecord) -> dict[str, Any]:
    latest = catalog.latest_restorable(job.name)
    lease = catalog.maintenance_lock(job.name)
    return {
        "job": job.name,
        "parallelism": job.parallelism,
        "max_parallelism": job.max_parallelism,
        "latest_checkpoint": None if latest is None else latest.checkpoint_id,
        "latest_completed_at": None if latest is None else plain(latest.completed_at),
        "lease_holder": None if lease is None else lease.holder,
        "lease_expires_at": None if lease is None else plain(lease.expires_at),
    }


def checkpoint_row(record: CheckpointRecord) -> dict[str, Any]:
    """One checkpoint as the page's table shows it.

    ``restore`` sums the subtasks' restores (``subtasks``, ``bytes`` read, the slowest
    ``max_seconds``) and ``latency`` lists p50/p95/p99 (µs) per state and access; both are
    ``None`` when the run did not record them. ``watermark`` (epoch ms) is ``None`` when the
    catalog does not keep one; ``watermark_at`` is it as an ISO timestamp (``None`` for no
    watermark or the initial one, ``MIN_WATERMARK``). ``warm`` is
    :attr:`~statecore.catalog.CheckpointRecord.warm_share` ("k/n" tasks continued warm).
    """
    restores = record.metrics.get("restore") or []
    latency = record.metrics.get("latency") or {}
    watermark = getattr(record, "watermark", None)  # kept by catalogs with streaming support
    return {
        "job": record.job,
        "checkpoint": record.checkpoint_id,
        "kind": record.kind.name,
        "status": record.status.name,
        "parallelism": record.parallelism,
        "max_parallelism": record.max_parallelism,
        "started_at": plain(record.started_at),
        "completed_at": plain(record.completed_at),
        "duration_s": (
            None if record.duration is None else round(record.duration.total_seconds(), 3)
        ),
        "rows": record.total_rows,
        "bytes": record.total_bytes,
        "states": len(record.tables),
        "watermark": plain(watermark),
        "watermark_at": _watermark_at(watermark),
        "restored_from": record.restored_from,
        "warm": record.warm_share,
        "error": record.error,
        "restore": (
            {
                "subtasks": len(restores),
                "bytes": sum(int(r.get("bytes", 0)) for r in restores),
                "max_seconds": round(max(float(r.get("seconds", 0.0)) for r in restores), 3),
            }
            if restores
            else None
        ),
        "latency": [
            {"state": state, "access": access, **plain(percentiles)}
            for state, accesses in sorted(latency.items())
            for access, percentiles in sorted(accesses.items())
        ]
        or None,
    }


def checkpoints_overview(catalog: Catalog, job: str) -> list[dict[str, Any]]:
    """The checkpoints of ``job``, newest first (:func:`checkpoint_row`)."""
    records = catalog.list_checkpoints(job)
    return [checkpoint_row(r) for r in sorted(records, key=lambda r: -r.checkpoint_id)]


def checkpoint_detail(catalog: Catalog, job: str, checkpoint_id: int) -> dict[str, Any]:
    """Checkpoint ``checkpoint_id`` of ``job`` (:func:`checkpoint_row`) with each subtask's
    restore and, per table, its Delta version and the rows and bytes of every key group it
    holds (``key_groups``: a list of ``{"key_group", "rows", "bytes"}`` by key group)."""
    record = catalog.get_checkpoint(job, checkpoint_id)
    row = checkpoint_row(record)
    row["restore_subtasks"] = plain(record.metrics.get("restore") or [])
    row["tables"] = [
        {
            "operator": table.operator,
            "state": table.state,
            "table_kind": table.table_kind,
            "version": table.version,
            "rows": table.rows,
            "bytes": table.bytes,
            "key_groups": [
                {"key_group": kg, "rows": rows, "bytes": size}
                for kg, (rows, size) in sorted(table.key_groups.items())
            ],
        }
        for table in sorted(record.tables, key=lambda t: (t.table_kind, t.operator, t.state))
    ]
    return row


def pending_outputs_overview(catalog: Catalog, job: str) -> list[dict[str, Any]]:
    """The pending output commits of ``job``'s completed checkpoints, by checkpoint id: each
    one's ``checkpoint``, ``output`` kind, ``table``, ``files``, ``rows``, ``pending_since``
    (ISO UTC), ``why`` and whether an attempt failed (``attempted``);
    :class:`~statecore.errors.JobNotFoundError` if the catalog does not know ``job``."""
    catalog.get_job(job)
    return [p.to_dict() for p in pending_output_status(catalog, job)]


def savepoints_overview(catalog: Catalog, job: str | None = None) -> list[dict[str, Any]]:
    """The savepoints (of ``job``, or of every job), newest first."""
    records: Sequence[SavepointRecord] = catalog.list_savepoints(job)
    return [
        {
            "job": s.job,
            "savepoint": s.name,
            "reason": s.reason,
            "from_checkpoint": s.source_checkpoint,
            "parallelism": s.parallelism,
            "max_parallelism": s.max_parallelism,
            "rows": s.rows,
            "bytes": s.bytes,
            "created_at": plain(s.created_at),
            "path": s.path,
        }
        for s in sorted(records, key=lambda s: s.created_at, reverse=True)
    ]


def lookup_row(
    config: StatecoreConfig,
    *,
    job: str,
    state: str,
    key: str,
    user_key: str | None = None,
    namespace: str | None = None,
    point: str | None = None,
    live: bool = False,
) -> dict[str, Any]:
    """A point lookup from a form's text fields, as a JSON-able dict (``live``: from the running
    stream's task, else the latest checkpoint, see ``statecore.query.lookup``).

    ``point`` is a checkpoint id or a savepoint *name* in the catalog (empty: the latest
    checkpoint); a folder is refused, so a form cannot make the server read a path of its
    choosing. ``key`` and ``user_key`` are parsed as the job's key and the map's user key.
    """
    if not job or not state or key is None or key == "":
        raise ConfigError("a lookup needs a job, a state and a key")
    point = (point or "").strip() or None
    if point is not None and ("/" in point or "\\" in point):
        raise ConfigError(
            f"job {job!r}: look up at a checkpoint id or a savepoint name, not a folder"
        )
    kwargs: dict[str, Any] = {"config": config}
    if namespace:
        kwargs["namespace"] = namespace
    if point is not None and point.isdigit():
        kwargs["checkpoint"] = int(point)
    elif point is not None:
        kwargs["savepoint"] = point
    if live:
        kwargs["live"] = True
    user = (user_key or "").strip() or None
    try:
        result = lookup(job, state, key, user_key=user, **kwargs)
    except (TypeError, ValueError) as exc:
        # a map's user key compared as text against integer user keys: retry as a number
        if user is None or not user.lstrip("-").isdigit():
            raise
        try:
            result = lookup(job, state, key, user_key=int(user), **kwargs)
        except (TypeError, ValueError):
            raise exc from None
    return plain(result.to_dict())  # type: ignore[no-any-return]


@dataclass(frozen=True, kw_only=True)
class DagRunRef:
    """What the page knows of an Airflow DAG run that published a job's checkpoint Asset.

    ``extra`` is the asset event's extra (a ``checkpoint_id`` there names the checkpoint
    outright); ``conf_date`` the run's ``date`` param (``YYYY-MM-DD``), the
    ``stateful_pipeline`` convention of checkpoint id ``YYYYMMDD`` (of the ``date`` param, else
    of the logical date, else of ``run_after`` for a run triggered without a logical date).
    """

    dag_id: str
    run_id: str
    job: str
    started_at: datetime | None
    ended_at: datetime | None
    logical_date: datetime | None = None
    run_after: datetime | None = None
    conf_date: str | None = None
    extra: Mapping[str, Any] | None = None


def link_runs(
    runs: Iterable[DagRunRef], checkpoints: Mapping[str, Sequence[CheckpointRecord]]
) -> list[dict[str, Any]]:
    """Which completed checkpoint each DAG run published, most specific evidence first:

    1. ``checkpoint_id`` in the asset event's extra;
    2. the ``YYYYMMDD`` id of the run's ``date`` param, else of its logical date, else of its
       ``run_after``, when the job has a checkpoint of that id (the convention of
       ``dags/stateful_pipeline.py``);
    3. the checkpoint of the job that completed last within the run's start and end.

    ``checkpoints`` maps each job to its checkpoints. A run none of these tie to a checkpoint
    is listed with ``checkpoint`` ``None``; ``matched_by`` says which rule matched.
    """
    out = []
    for run in runs:
        done = [
            c
            for c in checkpoints.get(run.job, ())
            if c.status in (CheckpointStatus.COMPLETED, CheckpointStatus.EXPIRED)
        ]
        by_id = {c.checkpoint_id: c for c in done}
        found: CheckpointRecord | None = None
        matched_by = None
        named = (run.extra or {}).get("checkpoint_id")
        if named is not None and str(named).isdigit() and int(str(named)) in by_id:
            found, matched_by = by_id[int(str(named))], "asset event"
        if found is None:
            for day in (run.conf_date, run.logical_date, run.run_after):
                ident = _date_id(day)
                if ident is not None and ident in by_id:
                    found, matched_by = by_id[ident], "date"
                    break
        if found is None and run.started_at is not None:
            start = run.started_at
            end = run.ended_at or datetime.max.replace(tzinfo=start.tzinfo)
            within = [
                (c.completed_at, c)
                for c in done
                if c.completed_at is not None and start <= c.completed_at <= end
            ]
            if within:
                found = max(within, key=lambda pair: pair[0])[1]
                matched_by = "time"
        out.append(
            {
                "dag_id": run.dag_id,
                "run_id": run.run_id,
                "job": run.job,
                "started_at": plain(run.started_at),
                "ended_at": plain(run.ended_at),
                "checkpoint": None if found is None else found.checkpoint_id,
                "matched_by": matched_by,
            }
        )
    return out


def _watermark_at(watermark: Any) -> str | None:
    if not isinstance(watermark, int) or isinstance(watermark, bool):
        return None
    if watermark <= MIN_WATERMARK:
        return None
    if watermark >= MAX_WATERMARK:
        return "end of input"
    try:
        return datetime.fromtimestamp(watermark / 1000, UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def _date_id(day: str | datetime | None) -> int | None:
    if isinstance(day, datetime):
        return int(day.strftime("%Y%m%d"))
    if isinstance(day, str) and (match := _DATE.match(day.strip())):
        return int("".join(match.groups()))
    return None
