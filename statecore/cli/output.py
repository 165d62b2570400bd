"""How the command prints results: aligned text tables, CSV or JSON lines."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from statecore.backends.timers import MAX_WATERMARK
from statecore.catalog import CheckpointRecord, PendingOutput, SavepointRecord, SkippedCheckpoint
from statecore.checkpoint.points import RestorePoint

__all__ = [
    "FORMATS",
    "NOT_ATTEMPTED",
    "checkpoint_rows",
    "format_rows",
    "format_table",
    "key_group_rows",
    "latency_rows",
    "pending_output_rows",
    "point_rows",
    "savepoint_rows",
    "skipped_rows",
    "table_rows",
    "watermark_time",
]

FORMATS = ("table", "csv", "json")


def format_table(table: pa.Table, fmt: str = "table") -> str:
    """Render rows as an aligned text table, CSV or JSON lines."""
    if fmt == "json":
        return "\n".join(json.dumps(row, default=_json_value) for row in table.to_pylist())
    if fmt == "csv":
        buf = io.BytesIO()
        pacsv.write_csv(table, buf)
        return buf.getvalue().decode()
    names = table.column_names
    rows = [["" if v is None else str(v) for v in row.values()] for row in table.to_pylist()]
    widths = [max([len(n), *(len(r[i]) for r in rows)]) for i, n in enumerate(names)]
    line = "  ".join(n.ljust(w) for n, w in zip(names, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def format_rows(
    rows: Sequence[Mapping[str, Any]], fmt: str = "table", empty: Sequence[str] = ("result",)
) -> str:
    """Render dicts (one per row) like :func:`format_table`."""
    if not rows:
        return format_table(pa.table({name: pa.array([], pa.string()) for name in empty}), fmt)
    plain = [{k: _plain(v, fmt) for k, v in row.items()} for row in rows]
    return format_table(pa.Table.from_pylist(plain), fmt)


def _plain(value: Any, fmt: str) -> Any:
    if isinstance(value, list | tuple):
        return list(value) if fmt == "json" else ", ".join(str(v) for v in value)
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, int) and not -(1 << 63) <= value < (1 << 63):
        return str(value)
    return value


def _json_value(value: object) -> object:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def watermark_time(watermark: int | None) -> datetime | str | None:
    """An event-time watermark (epoch ms) as a UTC time, for people (``None``: none yet;
    ``"end of input"`` for ``MAX_WATERMARK``)."""
    if watermark is None:
        return None
    if watermark >= MAX_WATERMARK:
        return "end of input"
    return datetime.fromtimestamp(watermark / 1000, UTC)


def checkpoint_rows(records: Sequence[CheckpointRecord]) -> list[dict[str, Any]]:
    return [
        {
            "job": c.job,
            "checkpoint": c.checkpoint_id,
            "kind": c.kind.name,
            "status": c.status.name,
            "parallelism": c.parallelism,
            "max_parallelism": c.max_parallelism,
            "states": len(c.tables),
            "rows": c.total_rows,
            "bytes": c.total_bytes,
            "duration_s": round(c.duration.total_seconds(), 1) if c.duration else None,
            "completed_at": c.completed_at,
            "watermark": watermark_time(c.watermark),
            "warm": c.warm_share,
        }
        for c in records
    ]


NOT_ATTEMPTED = (
    "no failed commit recorded: its writer stopped after the completion, before the commit"
)
"""Why a checkpoint's output is pending when no attempt to commit it failed."""


def pending_output_rows(
    pending: Sequence[PendingOutput], completed: Mapping[tuple[str, int], datetime | None]
) -> list[dict[str, Any]]:
    """The pending output commits of completed checkpoints: which table, how many files, since
    when (the checkpoint's completion, ``completed`` by job and checkpoint id) and why."""
    return [
        {
            "job": p.job,
            "checkpoint": p.checkpoint_id,
            "output": p.kind,
            "table": p.uri,
            "files": len(p.files),
            "rows": sum(int(f.get("rows", 0)) for f in p.files),
            "pending_since": completed.get((p.job, p.checkpoint_id)) or p.recorded_at,
            "why": p.last_error or NOT_ATTEMPTED,
        }
        for p in pending
    ]


def latency_rows(record: CheckpointRecord) -> list[dict[str, Any]]:
    """The checkpoint's state-access latency percentiles, a row per state and access."""
    return [
        {"state": state, "access": access, **percentiles}
        for state, accesses in record.metrics.get("latency", {}).items()
        for access, percentiles in accesses.items()
    ]


def skipped_rows(records: Sequence[SkippedCheckpoint]) -> list[dict[str, Any]]:
    return [
        {
            "job": s.job,
            "checkpoint": s.checkpoint_id,
            "status": "SKIPPED",
            "reason": s.reason,
            "skipped_at": s.skipped_at,
        }
        for s in records
    ]


def savepoint_rows(records: Sequence[SavepointRecord]) -> list[dict[str, Any]]:
    return [
        {
            "job": s.job,
            "savepoint": s.name,
            "kind": s.kind,
            "reason": s.reason,
            "from_checkpoint": s.source_checkpoint,
            "parallelism": s.parallelism,
            "max_parallelism": s.max_parallelism,
            "rows": s.rows,
            "bytes": s.bytes,
            "created_at": s.created_at,
            "path": s.path,
        }
        for s in records
    ]


def point_rows(point: RestorePoint) -> list[dict[str, Any]]:
    return [
        {
            "job": point.job,
            "name": point.name,
            "kind": "pin" if point.pinned else ("export" if point.savepoint else "checkpoint"),
            "reason": point.reason,
            "from_checkpoint": point.checkpoint_id,
            "parallelism": point.parallelism,
            "max_parallelism": point.max_parallelism,
            "tables": len(point.tables),
            "rows": point.total_rows,
            "bytes": point.total_bytes,
            "created_at": point.created_at,
            "watermark": watermark_time(point.watermark),
            "path": point.savepoint,
        }
    ]


def table_rows(point: RestorePoint) -> list[dict[str, Any]]:
    return [
        {
            "operator": t.operator,
            "state": t.state,
            "kind": t.table_kind,
            "delta_version": t.version,
            "rows": t.rows,
            "bytes": t.bytes,
            "partitions": len(t.key_groups),
            "path": t.path,
        }
        for t in point.tables
    ]


def key_group_rows(point: RestorePoint) -> list[dict[str, Any]]:
    """Sizes per state and key group (per subtask for operator state)."""
    return [
        {
            "operator": t.operator,
            "state": t.state,
            "kind": t.table_kind,
            "partition": "subtask" if t.table_kind == "operator" else "key_group",
            "value": part,
            "rows": rows,
            "bytes": size,
        }
        for t in point.tables
        for part, (rows, size) in sorted(t.key_groups.items())
    ]
