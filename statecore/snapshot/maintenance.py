"""Whole-table operations for savepoints, rescale, repair and cleanup, generic over the table kind.

Keyed and timers tables are partitioned by ``key_group``, operator-state tables by ``subtask``;
everything here reads the partition column from the table itself, so it works on every table a
checkpoint names. Files are always copied or written under new names, never moved or rewritten in
place, so a completed checkpoint's files stay exactly as they were.

:func:`vacuum` deletes the files of a table that none of the given versions references (nor the
latest version), once they are older than a grace period. ``DeltaTable.vacuum`` cannot do this:
it protects only the versions inside its retention window, not the ones a catalog still names.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction

from statecore.errors import CheckpointCommitError, CorruptSnapshotError
from statecore.snapshot.files import SnapshotFile, table_filesystem, write_file
from statecore.snapshot.table import TableFile, read_table_files

__all__ = [
    "TableLayout",
    "VacuumResult",
    "commit_files",
    "copy_files",
    "partition_sizes",
    "read_files",
    "table_files",
    "table_layout",
    "table_version",
    "vacuum",
    "write_partition_file",
]


@dataclass(frozen=True)
class TableLayout:
    """The schema of a table (partition column included) and the name of its partition column."""

    schema: pa.Schema
    partition: str

    @property
    def rows_schema(self) -> pa.Schema:
        """The columns stored in the files: every column but the partition."""
        return self.schema.remove(self.schema.get_field_index(self.partition))

    @classmethod
    def of(cls, rows_schema: pa.Schema, partition: str) -> TableLayout:
        """The layout of rows partitioned by an int32 ``partition`` column."""
        return cls(rows_schema.append(pa.field(partition, pa.int32(), nullable=False)), partition)


@dataclass(frozen=True)
class VacuumResult:
    """Files a vacuum deleted (or would delete, in a dry run), relative to the table root."""

    uri: str
    files: tuple[str, ...]
    bytes: int


def _open(uri: str, version: int | None = None) -> DeltaTable:
    try:
        return DeltaTable(uri, version=version)
    except (TableNotFoundError, DeltaError, OSError) as exc:
        raise CorruptSnapshotError(
            f"snapshot table {uri} version {version} cannot be opened: {exc}"
        ) from exc


def table_version(uri: str) -> int | None:
    """The latest version of the table at ``uri``, or ``None`` when there is no table."""
    try:
        return DeltaTable(uri).version()
    except (TableNotFoundError, DeltaError, OSError):
        return None


def table_layout(uri: str, version: int) -> TableLayout:
    """The schema and partition column of the table at ``version``."""
    table = _open(uri, version)
    partitions = table.metadata().partition_columns
    if len(partitions) != 1:
        raise CorruptSnapshotError(
            f"snapshot table {uri} is partitioned by {partitions}, not by one column"
        )
    return TableLayout(pa.schema(table.schema().to_arrow()), partitions[0])


def table_files(uri: str, version: int) -> list[TableFile]:
    """Every file of the table at ``version``, with its partition value, rows and size."""
    table = _open(uri, version)
    [partition] = table.metadata().partition_columns
    actions = pa.table(table.get_add_actions(flatten=True))
    return [
        TableFile(path, int(value), int(rows or 0), int(size))
        for path, value, rows, size in zip(
            actions.column("path").to_pylist(),
            actions.column(f"partition.{partition}").to_pylist(),
            actions.column("num_records").to_pylist(),
            actions.column("size_bytes").to_pylist(),
        )
    ]


def partition_sizes(uri: str, version: int) -> dict[int, tuple[int, int]]:
    """``{partition value: (rows, bytes)}`` of the table at ``version``."""
    sizes: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for f in table_files(uri, version):
        sizes[f.key_group][0] += f.rows
        sizes[f.key_group][1] += f.size
    return {part: (rows, size) for part, (rows, size) in sorted(sizes.items())}


def read_files(uri: str, files: Iterable[TableFile]) -> Iterator[tuple[TableFile, pa.Table]]:
    """Each file with its rows (without the partition column)."""
    return read_table_files(uri, files, label=f"snapshot table {uri}")


def _new_name(partition: str, value: int, prefix: str) -> str:
    return f"{partition}={value}/{prefix}-{uuid.uuid4().hex[:16]}.parquet"


def write_partition_file(
    uri: str, layout: TableLayout, value: int, rows: pa.Table, *, prefix: str
) -> SnapshotFile:
    """Write ``rows`` as a new file of partition ``value`` (not committed yet)."""
    return write_file(uri, _new_name(layout.partition, value, prefix), value, rows)


def copy_files(
    source_uri: str, target_uri: str, layout: TableLayout, files: Iterable[TableFile],
    *, prefix: str,
) -> list[SnapshotFile]:
    """Copy ``files`` byte for byte into the table at ``target_uri``, under new names."""
    source_fs, source_root = table_filesystem(source_uri)
    target_fs, target_root = table_filesystem(target_uri)
    same_fs = type(source_fs) is type(target_fs) and isinstance(source_fs, pafs.LocalFileSystem)
    out = []
    for f in files:
        relative = _new_name(layout.partition, f.key_group, prefix)
        source, target = f"{source_root}/{f.path}", f"{target_root}/{relative}"
        target_fs.create_dir(f"{target_root}/{layout.partition}={f.key_group}", recursive=True)
        try:
            if same_fs:
                source_fs.copy_file(source, target)
            else:
                with source_fs.open_input_stream(source) as src, \
                        target_fs.open_output_stream(target) as dst:
                    while chunk := src.read(1 << 22):
                        dst.write(chunk)
        except OSError as exc:
            raise CorruptSnapshotError(
                f"snapshot table {source_uri}: file {f.path} cannot be copied to {target_uri}: "
                f"{exc}"
            ) from exc
        # Row counts are all the committer needs; min/max statistics are an optimization.
        stats = f'{{"numRecords": {f.rows}}}'
        out.append(SnapshotFile(path=relative, key_group=f.key_group, rows=f.rows, size=f.size,
                                modification_time=time.time_ns() // 1_000_000, stats=stats))
    return out


def commit_files(
    uri: str,
    layout: TableLayout,
    files: Iterable[SnapshotFile],
    *,
    replaced: Iterable[int] | None,
    base_version: int | None,
    app_id: str,
    checkpoint_id: int,
) -> int:
    """Commit ``files``; the new version.

    ``replaced`` names the partitions whose files of ``base_version`` are removed (every
    partition when ``None``: the table becomes exactly ``files``, in ``layout``). A table that
    moved past ``base_version`` (a failed attempt) is restored to it first, as checkpoints do.
    """
    files = list(files)
    partition = layout.partition
    properties = CommitProperties(app_transactions=[Transaction(app_id, checkpoint_id)])
    adds: list[AddAction | RemoveAction] = [
        AddAction(f.path, f.size, {partition: str(f.key_group)}, f.modification_time, True,
                  f.stats) for f in files]
    try:
        if table_version(uri) is None:
            DeltaTable.create(uri, layout.schema, partition_by=[partition], mode="ignore")
        table = DeltaTable(uri)
        if base_version is not None and table.version() != base_version:
            table.restore(base_version)
            table = DeltaTable(uri)
        if replaced is None:
            table.create_write_transaction(adds, "overwrite", layout.schema,
                                           partition_by=[partition], commit_properties=properties)
            return DeltaTable(uri).version()
        changed = set(replaced) | {f.key_group for f in files}
        now = time.time_ns() // 1_000_000
        actions: list[AddAction | RemoveAction] = [
            RemoveAction(f.path, True, now, f.size, {partition: str(f.key_group)})
            for f in table_files(uri, table.version()) if f.key_group in changed
        ]
        actions += adds
        if actions:
            table.create_write_transaction(actions, "append", layout.schema,
                                           partition_by=[partition], commit_properties=properties)
        return DeltaTable(uri).version()
    except DeltaError as exc:
        raise CheckpointCommitError(
            f"checkpoint {checkpoint_id}: commit of {app_id} at {uri} failed: {exc}"
        ) from exc


def vacuum(
    uri: str, keep_versions: Iterable[int], *, older_than: timedelta, dry_run: bool = False
) -> VacuumResult:
    """Delete data files that neither ``keep_versions`` nor the latest version references and
    that are older than ``older_than``; the Delta log and hidden files are never touched."""
    fs, root = table_filesystem(uri)
    keep: set[str] = set()
    latest = table_version(uri)
    for version in {*keep_versions, *([] if latest is None else [latest])}:
        keep.update(f.path for f in table_files(uri, version))
    cutoff = time.time() - older_than.total_seconds()
    deleted: list[str] = []
    size = 0
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except OSError as exc:
        raise CorruptSnapshotError(f"snapshot table {uri} cannot be listed: {exc}") from exc
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        relative = info.path[len(root):].lstrip("/")
        if any(part.startswith(("_", ".")) for part in relative.split("/")) or relative in keep:
            continue
        if info.mtime is not None and info.mtime.timestamp() > cutoff:
            continue
        if not dry_run:
            fs.delete_file(info.path)
        deleted.append(relative)
        size += int(info.size or 0)
    return VacuumResult(uri, tuple(sorted(deleted)), size)
