"""Executor side: one Parquet file per (state, key group), written where the table will own it.

A file holds the rows of one key group without the ``key_group`` column (Delta keeps partition
values in the log), and carries the Delta statistics the committer records: the row count, and
min, max and null count of each flat column, taken from the Parquet footer the writer produced
(as Delta writers do) rather than computed over the rows a second time.

A file of rows with a ``key`` column is written sorted by key (a stable sort: the rows of one key
keep their order), in row groups of about :data:`ROW_GROUP_BYTES`, and says so in its footer
(``sorting_columns``): the footer's per-row-group minimum and maximum key then tell a point
lookup the one row group that can hold a key (:mod:`statecore.snapshot.row_groups`). The sort
changes no state: every reader treats a key group's rows as a set of keys.

A task writes its files from a few threads (:func:`write_key_group_files`): pyarrow encodes and
compresses, and the operating system creates files, without holding the GIL, so the files of
earlier key groups are written while the task builds the rows of the next one.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from statecore.errors import SnapshotWriteError
from statecore.snapshot.faults import fault_point
from statecore.snapshot.storage import table_filesystem, throttling_hint

__all__ = [
    "ROW_GROUP_BYTES",
    "WRITE_THREADS",
    "SnapshotFile",
    "delta_stats",
    "key_order",
    "stat_columns",
    "table_filesystem",
    "write_file",
    "write_in_threads",
    "write_key_group_file",
    "write_key_group_files",
]

WRITE_THREADS = 4
"""Threads a task writes its snapshot files from, by default. Not tied to the cores: a file's
creation is a wait (a metadata operation, an object-store request) more than work."""

ROW_GROUP_BYTES = 256 << 10
"""About how many bytes of rows (in memory, before compression) a row group of a key-group
file holds: a point lookup reads one row group and the footer, whose size grows with the
number of row groups; 256 KiB keeps both small for files of a few MB up to many GB."""

_STAT_TYPES = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_boolean,
)

# zstd as before; no dictionary: keys are unique within a key group, so a dictionary is built
# only to be thrown away, and zstd compresses the few repeated columns (namespace) as well.
_WRITE_OPTIONS: dict[str, Any] = {"compression": "zstd", "use_dictionary": False}


@dataclass(frozen=True, kw_only=True)
class SnapshotFile:
    """A written, not yet committed, Parquet file of one key group."""

    path: str  # relative to the table root, e.g. "key_group=7/cp-3-0-1a2b.parquet"
    key_group: int  # the partition value: the key group (the subtask in operator-state tables)
    rows: int
    size: int
    modification_time: int
    stats: str


def stat_columns(schema: pa.Schema) -> list[str]:
    """The columns Delta statistics are kept for (flat numbers, strings, booleans)."""
    return [f.name for f in schema if any(check(f.type) for check in _STAT_TYPES)]


def delta_stats(rows: int, metadata: pq.FileMetaData, columns: list[str]) -> str:
    """Delta statistics (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``) from the
    footer of the written file; a column without footer statistics is left out."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    groups = [metadata.row_group(g) for g in range(metadata.num_row_groups)]
    for name in columns:
        leaf = leaves.get(name)
        if leaf is None:
            continue
        chunks = [(group.num_rows, group.column(leaf).statistics) for group in groups]
        if any(s is None or not s.has_null_count for _, s in chunks):
            continue
        nulls[name] = sum(s.null_count for _, s in chunks)
        bounded = [s for n, s in chunks if n > s.null_count]
        if bounded and all(s.has_min_max for s in bounded):
            mins[name] = min(s.min for s in bounded)
            maxs[name] = max(s.max for s in bounded)
    return json.dumps(
        {"numRecords": rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    )


def key_order(rows: pa.Table) -> tuple[pa.Table, list[pq.SortingColumn] | None]:
    """``rows`` in ascending ``key`` order, the rows of one key in their order (as they are
    when there is no ``key`` column or they are in order already), and the footer's record of
    the order (``None``: no ``key`` column)."""
    if "key" not in rows.column_names:
        return rows, None
    sorting = [pq.SortingColumn(rows.schema.get_field_index("key"))]
    if rows.num_rows < 2:
        return rows, sorting
    keys = rows.column("key")
    in_order = pc.all(pc.less_equal(keys.slice(0, len(keys) - 1), keys.slice(1))).as_py()
    if in_order and keys.null_count == 0:
        return rows, sorting
    return rows.take(pc.sort_indices(rows, sort_keys=[("key", "ascending")])), sorting


def _row_group_rows(rows: pa.Table) -> int:
    """Rows per row group for about :data:`ROW_GROUP_BYTES` of rows each."""
    per_row = max(1, int(rows.nbytes) // max(1, int(rows.num_rows)))
    return max(1, ROW_GROUP_BYTES // per_row)


def _write(table_uri: str, relative: str, partition_value: int, rows: pa.Table) -> SnapshotFile:
    fs, root = table_filesystem(table_uri)
    full = f"{root}/{relative}"
    columns = stat_columns(rows.schema)
    rows, sorting = key_order(rows)
    footer: list[pq.FileMetaData] = []
    try:
        sink = fs.open_output_stream(full)
    except FileNotFoundError:  # the partition's first file (object stores have no folders)
        fs.create_dir(full.rsplit("/", 1)[0], recursive=True)
        sink = fs.open_output_stream(full)
    with sink:
        with pq.ParquetWriter(
            sink,
            rows.schema,
            write_statistics=columns or False,
            metadata_collector=footer,
            sorting_columns=sorting,
            **_WRITE_OPTIONS,
        ) as writer:
            writer.write_table(rows, row_group_size=_row_group_rows(rows))
        size = sink.tell()
    return SnapshotFile(
        path=relative,
        key_group=partition_value,
        rows=rows.num_rows,
        size=size,
        modification_time=time.time_ns() // 1_000_000,
        stats=delta_stats(rows.num_rows, footer[0], columns),
    )


def write_file(table_uri: str, relative: str, partition_value: int, rows: pa.Table) -> SnapshotFile:
    """Write ``rows`` as the file ``relative`` (``<partition>=<value>/<name>.parquet``) of the
    table at ``table_uri``, not committed yet."""
    try:
        return _write(table_uri, relative, partition_value, rows)
    except (OSError, pa.ArrowException) as exc:
        raise SnapshotWriteError(
            f"snapshot table {table_uri}: file {relative} cannot be written: {exc}"
            f"{throttling_hint(exc)}"
        ) from exc


def write_key_group_file(
    table_uri: str,
    key_group: int,
    rows: pa.Table,
    *,
    checkpoint_id: int,
    subtask: int,
    partition: str = "key_group",
) -> SnapshotFile:
    """Write the rows of one key group (or of one subtask, with ``partition="subtask"``) as a
    Parquet file inside the table's partition folder."""
    relative = (
        f"{partition}={key_group}/cp-{checkpoint_id}-{subtask}-{uuid.uuid4().hex[:12]}.parquet"
    )
    try:
        written = _write(table_uri, relative, key_group, rows)
    except (OSError, pa.ArrowException) as exc:
        raise SnapshotWriteError(
            f"checkpoint {checkpoint_id}: {partition} {key_group} of snapshot table "
            f"{table_uri} cannot be written to {relative}: {exc}{throttling_hint(exc)}"
        ) from exc
    fault_point("task:snapshot")
    return written


def write_key_group_files(
    table_uri: str,
    parts: Iterable[tuple[int, pa.Table]],
    *,
    checkpoint_id: int,
    subtask: int,
    partition: str = "key_group",
    threads: int = WRITE_THREADS,
) -> list[SnapshotFile]:
    """Write each ``(key_group, rows)`` of ``parts`` as :func:`write_key_group_file` does, from
    ``threads`` threads (:func:`write_in_threads`); the files, in the order of ``parts``."""
    return write_in_threads(
        functools.partial(
            write_key_group_file,
            table_uri,
            checkpoint_id=checkpoint_id,
            subtask=subtask,
            partition=partition,
        ),
        parts,
        threads=threads,
    )


def write_in_threads(
    write: Callable[[int, pa.Table], SnapshotFile],
    parts: Iterable[tuple[int, pa.Table]],
    *,
    threads: int = WRITE_THREADS,
) -> list[SnapshotFile]:
    """``write(part, rows)`` for each ``(part, rows)`` of ``parts``, from ``threads`` threads;
    the files, in the order of ``parts``.

    ``parts`` is consumed in the calling thread, at most two files per thread ahead of the
    writes (so a lazily built snapshot stays a few key groups in memory). The first failure is
    raised once the writes under way have ended; no further file is started.
    """
    threads = max(1, threads)
    files: list[SnapshotFile] = []
    pending: deque[Future[SnapshotFile]] = deque()
    with ThreadPoolExecutor(threads, thread_name_prefix="statecore-snapshot") as pool:
        try:
            for part, rows in parts:
                if len(pending) >= 2 * threads:
                    files.append(pending.popleft().result())
                pending.append(pool.submit(write, part, rows))
            while pending:
                files.append(pending.popleft().result())
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    return files
