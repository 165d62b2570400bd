"""Whole-table operations for savepoints, rescale, repair and cleanup, generic over the table kind.

Keyed and timers tables are partitioned by ``key_group``, operator-state tables by ``subtask``;
everything here reads the partition column from the table itself, so it works on every table a
checkpoint names. Files are always copied or written under new names, never moved or rewritten in
place, so a completed checkpoint's files stay exactly as they were.

:func:`vacuum` deletes the files of a table that none of the given versions references (nor the
latest version, nor any version after ``keep_after_version``), once they are older than a grace
period and not written since ``protected_since`` (the start of a checkpoint still in progress,
whose files are not committed yet). ``DeltaTable.vacuum`` cannot do this: it protects only the
versions inside its retention window, not the ones a catalog still names.
"""

from __future__ import annotations

import time
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
from statecore.snapshot.commits import CommitMetadata
from statecore.snapshot.copies import new_file_name
from statecore.snapshot.files import SnapshotFile, table_filesystem, write_file
from statecore.snapshot.foreign import MAINTENANCE_METADATA, RESTORE_METADATA, check_no_foreign
from statecore.snapshot.log import checkpoint_log
from statecore.snapshot.output import checkpoint_of_file, newest_checkpoint_commit
from statecore.snapshot.storage import POST_COMMIT, create_table, open_table, throttling_hint
from statecore.snapshot.table import Fence, TableFile, fenced_failure, read_table_files

__all__ = [
    "TableLayout",
    "VacuumResult",
    "commit_files",
    "missing_log_entries",
    "partition_sizes",
    "read_files",
    "restore_version",
    "table_files",
    "table_layout",
    "table_reader_features",
    "table_version",
    "vacuum",
    "versions_since",
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
        return open_table(uri, version=version)
    except (TableNotFoundError, DeltaError, OSError) as exc:
        raise CorruptSnapshotError(
            f"snapshot table {uri} version {version} cannot be opened: {exc}{throttling_hint(exc)}"
        ) from exc


def table_version(uri: str) -> int | None:
    """The latest version of the table at ``uri``, or ``None`` when there is no table."""
    try:
        return open_table(uri).version()
    except (TableNotFoundError, DeltaError, OSError):
        return None


def missing_log_entries(uri: str, version: int) -> list[str]:
    """The commit files of ``_delta_log`` that reading the table at ``version`` needs and that
    are missing (after the last Delta checkpoint at or before it), relative to the table."""
    fs, root = table_filesystem(uri)
    log = f"{root.rstrip('/')}/_delta_log"
    try:
        infos = fs.get_file_info(pafs.FileSelector(log, allow_not_found=True))
    except OSError:
        return ["_delta_log"]
    names = {info.path.rsplit("/", 1)[-1] for info in infos}
    checkpoints = [
        int(name.split(".", 1)[0])
        for name in names
        if ".checkpoint." in name and name.split(".", 1)[0].isdigit()
    ]
    start = max((c + 1 for c in checkpoints if c <= version), default=0)
    return [
        f"_delta_log/{n:020d}.json"
        for n in range(start, version + 1)
        if f"{n:020d}.json" not in names
    ]


def table_layout(uri: str, version: int) -> TableLayout:
    """The schema and partition column of the table at ``version``."""
    table = _open(uri, version)
    partitions = table.metadata().partition_columns
    if len(partitions) != 1:
        raise CorruptSnapshotError(
            f"snapshot table {uri} is partitioned by {partitions}, not by one column"
        )
    return TableLayout(pa.schema(table.schema().to_arrow()), partitions[0])


def table_reader_features(uri: str, version: int) -> list[str]:
    """The Delta reader features the table at ``version`` needs (deletion vectors, column
    mapping, ...): statecore reads a table's files as they are, so it reads none of them."""
    protocol = _open(uri, version).protocol()
    features = list(protocol.reader_features or [])
    if protocol.min_reader_version == 2:  # column mapping, before reader features were named
        features.append("columnMapping")
    return features


def table_files(uri: str, version: int) -> list[TableFile]:
    """Every file of the table at ``version``, with its partition value (0 in a table without
    partitions, as an output table), rows and size."""
    table = _open(uri, version)
    partitions = table.metadata().partition_columns
    actions = pa.table(table.get_add_actions(flatten=True))
    paths = actions.column("path").to_pylist()
    values = (
        actions.column(f"partition.{partitions[0]}").to_pylist() if partitions else [0] * len(paths)
    )
    return [
        TableFile(path, int(value), int(rows or 0), int(size))
        for path, value, rows, size in zip(
            paths,
            values,
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


def write_partition_file(
    uri: str, layout: TableLayout, value: int, rows: pa.Table, *, prefix: str
) -> SnapshotFile:
    """Write ``rows`` as a new file of partition ``value`` (not committed yet)."""
    return write_file(uri, new_file_name(layout.partition, value, prefix), value, rows)


def commit_files(
    uri: str,
    layout: TableLayout,
    files: Iterable[SnapshotFile],
    *,
    replaced: Iterable[int] | None,
    base_version: int | None,
    app_id: str,
    checkpoint_id: int,
    metadata: CommitMetadata | None = None,
    fence: Fence | None = None,
) -> int:
    """Commit ``files``; the new version.

    ``replaced`` names the partitions whose files of ``base_version`` are removed (every
    partition when ``None``: the table becomes exactly ``files``, in ``layout``). A table that
    moved past ``base_version`` (a failed attempt) is restored to it first, as checkpoints do,
    and never over another writer's commit (:class:`~statecore.errors.ForeignCommitError`).
    ``metadata`` is recorded in the commit. With ``fence`` (the lease of the maintenance
    operation that commits), the commit and the restore carry its epoch and are refused with
    :class:`~statecore.errors.ConcurrentRunError` once its lease is lost or a newer writer
    committed here, as a run's commits are (:class:`~statecore.snapshot.table.Fence`).
    """
    files = list(files)
    partition = layout.partition
    transactions = [Transaction(app_id, checkpoint_id)]
    if fence is not None:
        transactions.append(fence.transaction())
    properties = CommitProperties(
        app_transactions=transactions,
        custom_metadata={  # the mark that tells statecore's commits from other writers'
            MAINTENANCE_METADATA: str(checkpoint_id),
            **({} if metadata is None else metadata.to_properties()),
        },
    )
    where = f"checkpoint {checkpoint_id}: {app_id} at {uri}"
    adds: list[AddAction | RemoveAction] = [
        AddAction(f.path, f.size, {partition: str(f.key_group)}, f.modification_time, True, f.stats)
        for f in files
    ]
    try:
        if table_version(uri) is None:
            create_table(uri, layout.schema, partition_by=[partition], mode="ignore")
        table = open_table(uri)
        if fence is not None:
            fence.verify(table, where)
        if (
            base_version is not None
            and table.version() != base_version
            and check_no_foreign(
                uri,
                base_version,
                table.version(),
                label=app_id,
                checkpoint=f"checkpoint {checkpoint_id}",
            )
        ):  # only statecore's own attempt is undone, never another writer's commit
            table.restore(
                base_version,
                commit_properties=CommitProperties(
                    app_transactions=transactions[1:] or None,
                    custom_metadata={RESTORE_METADATA: str(base_version)},
                ),
                post_commithook_properties=POST_COMMIT,
            )
            table = open_table(uri)
        if replaced is None:
            table.create_write_transaction(
                adds,
                "overwrite",
                layout.schema,
                partition_by=[partition],
                commit_properties=properties,
                post_commithook_properties=POST_COMMIT,
            )
            return _committed(uri)
        changed = set(replaced) | {f.key_group for f in files}
        now = time.time_ns() // 1_000_000
        actions: list[AddAction | RemoveAction] = [
            RemoveAction(f.path, True, now, f.size, {partition: str(f.key_group)})
            for f in table_files(uri, table.version())
            if f.key_group in changed
        ]
        actions += adds
        if actions:
            table.create_write_transaction(
                actions,
                "append",
                layout.schema,
                partition_by=[partition],
                commit_properties=properties,
                post_commithook_properties=POST_COMMIT,
            )
        return _committed(uri)
    except (DeltaError, OSError) as exc:  # delta-rs raises OSError for storage errors
        fenced = fenced_failure(exc, uri, fence, where)
        if fenced is not None:
            raise fenced from exc
        raise CheckpointCommitError(
            f"checkpoint {checkpoint_id}: commit of {app_id} at {uri} failed: {exc}"
            f"{throttling_hint(exc)}"
        ) from exc


def restore_version(
    uri: str,
    version: int,
    *,
    app_id: str,
    checkpoint_id: int,
    metadata: CommitMetadata | None = None,
    fence: Fence | None = None,
) -> int:
    """Make the table's files those of its ``version`` again, in a new commit that adds and
    removes files but copies no byte (Delta's RESTORE); the version that holds them: the new
    one, or ``version`` itself when the table is still at it (nothing to commit). Fenced and
    recorded as :func:`commit_files` commits."""
    transactions = [Transaction(app_id, checkpoint_id)]
    if fence is not None:
        transactions.append(fence.transaction())
    where = f"checkpoint {checkpoint_id}: {app_id} at {uri}"
    try:
        table = open_table(uri)
        if fence is not None:
            fence.verify(table, where)
        if table.version() == version:
            return version
        missing = missing_log_entries(uri, version)
        if missing:
            raise CorruptSnapshotError(
                f"snapshot table {uri}: version {version} cannot be restored, its log entries "
                f"{', '.join(missing)} are gone"
            )
        table.restore(
            version,
            commit_properties=CommitProperties(
                app_transactions=transactions,
                custom_metadata={
                    MAINTENANCE_METADATA: str(checkpoint_id),
                    **({} if metadata is None else metadata.to_properties()),
                },
            ),
            post_commithook_properties=POST_COMMIT,
        )
        return _committed(uri)
    except DeltaError as exc:
        fenced = fenced_failure(exc, uri, fence, where)
        if fenced is not None:
            raise fenced from exc
        raise CheckpointCommitError(
            f"checkpoint {checkpoint_id}: restore of {app_id} at {uri} to version {version} "
            f"failed: {exc}"
        ) from exc


def _committed(uri: str) -> int:
    """The version just committed at ``uri``, with a log checkpoint when one is due (as a
    checkpoint's own commits write them: :mod:`statecore.snapshot.log`)."""
    table = open_table(uri)
    checkpoint_log(table, uri)
    return table.version()


def versions_since(uri: str, timestamp: float) -> list[int]:
    """The versions of the table at ``uri`` committed at or after ``timestamp`` (epoch seconds),
    by the commit times in its Delta log."""
    try:
        history = open_table(uri).history()
    except (TableNotFoundError, DeltaError, OSError):
        return []
    return [
        int(entry["version"])
        for entry in history
        if int(entry.get("timestamp", 0)) >= timestamp * 1000
    ]


def vacuum(
    uri: str,
    keep_versions: Iterable[int],
    *,
    older_than: timedelta,
    keep_after_version: int | None = None,
    protected_since: float | None = None,
    dry_run: bool = False,
) -> VacuumResult:
    """Delete data files that neither ``keep_versions``, the latest version nor any version
    after ``keep_after_version`` references, that are older than ``older_than`` and that were
    not modified at or after ``protected_since`` (epoch seconds). Only Parquet data files are
    candidates: the Delta log, deletion vectors and hidden files are never touched, nor an
    output table's files of a checkpoint above the newest one committed to it (a pending
    output commit, committed when it is rolled forward: :mod:`statecore.checkpoint.outputs`)."""
    fs, root = table_filesystem(uri)
    newest = newest_checkpoint_commit(uri)
    keep: set[str] = set()
    latest = table_version(uri)
    versions = set(keep_versions)
    if latest is not None:
        first = latest if keep_after_version is None else keep_after_version + 1
        versions.update(range(max(first, 0), latest + 1))
    for version in versions:
        keep.update(f.path for f in table_files(uri, version))
    cutoff = time.time() - older_than.total_seconds()
    if protected_since is not None:
        cutoff = min(cutoff, protected_since)
    deleted: list[str] = []
    size = 0
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except OSError as exc:
        raise CorruptSnapshotError(
            f"snapshot table {uri} cannot be listed: {exc}{throttling_hint(exc)}"
        ) from exc
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        relative = info.path[len(root) :].lstrip("/")
        if (
            not relative.endswith(".parquet")  # Delta's own files (deletion vectors, ...)
            or any(part.startswith(("_", ".")) for part in relative.split("/"))
            or relative in keep
            or _uncommitted_output(relative, newest)
        ):
            continue
        if info.mtime is None:
            if protected_since is not None:
                continue  # its age is unknown: it may belong to the checkpoint in progress
        elif info.mtime.timestamp() >= cutoff:
            continue
        if not dry_run:
            fs.delete_file(info.path)
        deleted.append(relative)
        size += int(info.size or 0)
    return VacuumResult(uri, tuple(sorted(deleted)), size)


def _uncommitted_output(relative: str, newest: int | None) -> bool:
    """Whether ``relative`` is an output file of a checkpoint above ``newest`` (the newest
    checkpoint committed to the table): its commit may be pending, so VACUUM keeps it."""
    checkpoint = checkpoint_of_file(relative.rsplit("/", 1)[-1])
    return checkpoint is not None and (newest is None or checkpoint > newest)
