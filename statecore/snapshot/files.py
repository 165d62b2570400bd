"""Executor side: one Parquet file per (state, key group), written where the table will own it.

A file holds the rows of one key group without the ``key_group`` column (Delta keeps partition
values in the log), and carries the Delta statistics the committer records.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

__all__ = ["SnapshotFile", "write_key_group_file", "table_filesystem"]

_STAT_TYPES = (pa.types.is_integer, pa.types.is_floating, pa.types.is_string,
               pa.types.is_large_string, pa.types.is_boolean)


@dataclass(frozen=True, kw_only=True)
class SnapshotFile:
    """A written, not yet committed, Parquet file of one key group."""

    path: str  # relative to the table root, e.g. "key_group=7/cp-3-0-1a2b.parquet"
    key_group: int  # the partition value: the key group (the subtask in operator-state tables)
    rows: int
    size: int
    modification_time: int
    stats: str


def table_filesystem(table_uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and root path of a table URI (a local path or e.g. ``s3://...``)."""
    if "://" not in table_uri:
        return pafs.LocalFileSystem(), table_uri
    fs, path = pafs.FileSystem.from_uri(table_uri)
    return fs, str(path)


def _stats(rows: pa.Table) -> str:
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in rows.column_names:
        column = rows.column(name)
        if not any(check(column.type) for check in _STAT_TYPES):
            continue
        nulls[name] = column.null_count
        if len(column) > column.null_count:
            bounds = pc.min_max(column)
            mins[name] = bounds["min"].as_py()
            maxs[name] = bounds["max"].as_py()
    return json.dumps({"numRecords": rows.num_rows, "minValues": mins, "maxValues": maxs,
                       "nullCount": nulls})


def write_key_group_file(
    table_uri: str, key_group: int, rows: pa.Table, *, checkpoint_id: int, subtask: int,
    partition: str = "key_group",
) -> SnapshotFile:
    """Write the rows of one key group (or of one subtask, with ``partition="subtask"``) as a
    Parquet file inside the table's partition folder."""
    fs, root = table_filesystem(table_uri)
    folder = f"{partition}={key_group}"
    relative = f"{folder}/cp-{checkpoint_id}-{subtask}-{uuid.uuid4().hex[:12]}.parquet"
    fs.create_dir(f"{root}/{folder}", recursive=True)
    full = f"{root}/{relative}"
    pq.write_table(rows, full, filesystem=fs, compression="zstd")
    size = fs.get_file_info(full).size
    return SnapshotFile(
        path=relative,
        key_group=key_group,
        rows=rows.num_rows,
        size=int(size or 0),
        modification_time=time.time_ns() // 1_000_000,
        stats=_stats(rows),
    )
