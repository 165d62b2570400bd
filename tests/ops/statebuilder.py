"""Checkpoints written straight from Arrow rows, in the warehouse layout the runtime writes.

Tests of the operations need a job's state, not a job: this writes keyed tables (partitioned by
key group, with TTL timestamps when asked), operator-state tables (partitioned by subtask) and a
timers table, commits them like the coordinator does, and completes a checkpoint in the catalog.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from statecore.catalog import (
    Catalog,
    CheckpointKind,
    CheckpointRecord,
    StateRecord,
    TableVersion,
)
from statecore.checkpoint.points import table_location
from statecore.config import StatecoreConfig
from statecore.keygroups.arrow import assign_to_key_groups
from statecore.snapshot.rewrite import (
    TableLayout,
    commit_files,
    partition_sizes,
    table_version,
    write_partition_file,
)
from statecore.types import schema_to_text

OPERATOR = "main"


@dataclass(frozen=True)
class Table:
    """Rows of one table: ``kind`` is the state kind (value, list, ..., operator_list, timers)."""

    rows: pa.Table
    kind: str = "value"
    table_kind: str = "keyed"
    ttl_ms: int | None = None


def value_rows(values: Mapping[str, float], stamps: Mapping[str, int] | None = None) -> pa.Table:
    columns: dict[str, Any] = {
        "key": pa.array(list(values), pa.string()),
        "namespace": pa.array(["" for _ in values], pa.string()),
        "value": pa.array(list(values.values()), pa.float64()),
    }
    fields = [
        pa.field("key", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("value", pa.float64()),
    ]
    if stamps is not None:
        columns["ttl_timestamp"] = pa.array([stamps[k] for k in values], pa.int64())
        fields.append(pa.field("ttl_timestamp", pa.int64(), nullable=False))
    return pa.table(columns, schema=pa.schema(fields))


def list_rows(values: Mapping[str, list[str]], stamps: Mapping[str, list[int]]) -> pa.Table:
    schema = pa.schema(
        [
            pa.field("key", pa.string(), nullable=False),
            pa.field("namespace", pa.string(), nullable=False),
            pa.field("value", pa.list_(pa.string())),
            pa.field("ttl_timestamp", pa.list_(pa.int64()), nullable=False),
        ]
    )
    return pa.table(
        {
            "key": list(values),
            "namespace": ["" for _ in values],
            "value": list(values.values()),
            "ttl_timestamp": [stamps[k] for k in values],
        },
        schema=schema,
    )


def timer_rows(timers: Mapping[str, int]) -> pa.Table:
    schema = pa.schema(
        [
            pa.field("key", pa.string(), nullable=False),
            pa.field("namespace", pa.string(), nullable=False),
            pa.field("timestamp", pa.int64(), nullable=False),
            pa.field("time_domain", pa.string(), nullable=False),
        ]
    )
    return pa.table(
        {
            "key": list(timers),
            "namespace": ["" for _ in timers],
            "timestamp": list(timers.values()),
            "time_domain": ["event_time" for _ in timers],
        },
        schema=schema,
    )


def operator_rows(per_subtask: Mapping[int, list[str]]) -> pa.Table:
    subtasks = [s for s, values in per_subtask.items() for _ in values]
    values = [v for vs in per_subtask.values() for v in vs]
    return pa.table(
        {
            "subtask": pa.array(subtasks, pa.int32()),
            "mode": ["split" for _ in values],
            "value": values,
        }
    )


def _files(
    uri: str, table: Table, max_parallelism: int, checkpoint_id: int
) -> tuple[TableLayout, list[Any]]:
    rows = table.rows
    if table.table_kind == "operator":
        parts = rows.column("subtask").to_numpy()
        rows = rows.drop_columns(["subtask"])
        layout = TableLayout.of(rows.schema, "subtask")
    else:
        parts = assign_to_key_groups(rows.column("key"), max_parallelism)
        layout = TableLayout.of(rows.schema, "key_group")
    files = [
        write_partition_file(
            uri, layout, int(p), rows.filter(pa.array(parts == p)), prefix=f"cp-{checkpoint_id}"
        )
        for p in np.unique(parts)
    ]
    return layout, files


def write_checkpoint(
    config: StatecoreConfig,
    job: str,
    checkpoint_id: int,
    tables: Mapping[str, Table],
    *,
    parallelism: int = 2,
    max_parallelism: int = 128,
    input_identity: str | None = None,
    watermark: int | None = None,
) -> CheckpointRecord:
    """Checkpoint ``checkpoint_id`` of ``job`` with exactly ``tables`` (replacing what a table
    held before), based on the latest one, as the coordinator commits them; it records
    ``input_identity`` (what it processed) and completes at ``watermark``."""
    with Catalog.connect(config.catalog_url) as catalog:
        catalog.ensure_job(job, parallelism=parallelism, max_parallelism=max_parallelism)
        base = catalog.latest_checkpoint(job)
        catalog.begin_checkpoint(
            job,
            checkpoint_id,
            kind=CheckpointKind.CHECKPOINT,
            parallelism=parallelism,
            max_parallelism=max_parallelism,
            restored_from=base.checkpoint_id if base else None,
            input_identity=input_identity,
        )
        versions, states = [], []
        for name, table in tables.items():
            uri = f"{config.warehouse}/{job}/{table_location(OPERATOR, table.table_kind, name)}"
            layout, files = _files(uri, table, max_parallelism, checkpoint_id)
            version = commit_files(
                uri,
                layout,
                files,
                replaced=None,
                base_version=table_version(uri),
                app_id=f"{job}/{OPERATOR}/{name}",
                checkpoint_id=checkpoint_id,
            )
            sizes = partition_sizes(uri, version)
            versions.append(
                TableVersion(
                    operator=OPERATOR,
                    state=name,
                    table_kind=table.table_kind,
                    path=uri,
                    version=version,
                    rows=sum(r for r, _ in sizes.values()),
                    bytes=sum(b for _, b in sizes.values()),
                    key_groups=sizes,
                )
            )
            ttl = None if table.ttl_ms is None else {"ttl_ms": table.ttl_ms}
            states.append(
                StateRecord(
                    job=job,
                    operator=OPERATOR,
                    name=name,
                    kind=table.kind,
                    descriptor={"kind": table.kind, **({"ttl": ttl} if ttl else {})},
                    schema=schema_to_text(layout.rows_schema),
                    ttl=ttl,
                )
            )
        catalog.register_states(job, OPERATOR, states)
        return catalog.complete_checkpoint(job, checkpoint_id, tables=versions, watermark=watermark)


def catalog_snapshot(config: StatecoreConfig) -> str:
    """Everything the catalog holds, as text: to assert that an operation changed nothing."""
    with Catalog.connect(config.catalog_url) as catalog:
        out: dict[str, Any] = {
            "jobs": [],
            "savepoints": [str(s) for s in catalog.list_savepoints()],
        }
        for job in catalog.list_jobs():
            out["jobs"].append(
                {
                    "job": str(job),
                    "lock": str(catalog.maintenance_lock(job.name)),
                    "checkpoints": [str(c) for c in catalog.list_checkpoints(job.name)],
                    "states": [str(s) for s in catalog.list_states(job.name)],
                }
            )
        return json.dumps(out, indent=1, sort_keys=True)


def files_under(path: str) -> dict[str, int]:
    """Every file below ``path`` with its size: to assert that nothing was written or deleted."""
    from pathlib import Path

    root = Path(path)
    return (
        {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}
        if root.exists()
        else {}
    )
