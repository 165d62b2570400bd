"""Driver side: one Delta table per state, committed once per checkpoint, read by version.

A commit replaces exactly the changed key groups: it removes their files of the base version and
adds the new ones in one transaction; every other key group keeps its files (incremental at
key-group granularity). The commit names the checkpoint as a Delta application transaction.
If the table moved past the base version (an earlier attempt failed after committing here), it is
first restored to the base version, so a failed checkpoint leaves nothing a later one builds on.

Operator-state tables are partitioned by ``subtask`` instead and replaced as a whole each
checkpoint; so is a keyed table whose schema migrated (every key group is rewritten).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction

from statecore.errors import CheckpointCommitError, CorruptSnapshotError
from statecore.keygroups import KeyGroupRange
from statecore.snapshot.files import SnapshotFile, table_filesystem

__all__ = ["SnapshotTable", "TableFile", "key_group_schema", "read_table_files"]

PARTITION = "key_group"
_THREADED_DECODE_BYTES = 1 << 20  # smaller files decode faster in one thread


def key_group_schema(rows_schema: pa.Schema, partition: str = PARTITION) -> pa.Schema:
    """The table schema: the rows' columns plus the ``key_group`` (or other) partition column."""
    return rows_schema.append(pa.field(partition, pa.int32(), nullable=False))


@dataclass(frozen=True)
class TableFile:
    """A committed file of one key group at some table version."""

    path: str
    key_group: int
    rows: int
    size: int


def read_table_files(
    uri: str, files: Iterable[TableFile], *, label: str
) -> Iterator[tuple[TableFile, pa.Table]]:
    """Each file of the table at ``uri`` with its rows (without the partition column).

    A file is read in one request into memory and decoded there: key-group files are small,
    and reading the footer first, then the columns, would read most of each file twice. It is
    decoded as one Parquet file (``pq.read_table`` would also load ``pyarrow.dataset``), a small
    one in this thread.
    """
    fs, root = table_filesystem(uri)
    for f in files:
        try:
            with fs.open_input_file(f"{root}/{f.path}") as source:
                data = source.read()
            rows = pq.ParquetFile(pa.BufferReader(data)).read(
                use_threads=len(data) >= _THREADED_DECODE_BYTES)
        except (OSError, pa.ArrowInvalid) as exc:
            raise CorruptSnapshotError(
                f"{label}, key group {f.key_group}: file {f.path} is missing or unreadable: "
                f"{exc}"
            ) from exc
        yield f, rows


class SnapshotTable:
    """One state's Delta table at ``uri`` with the given row schema.

    It keeps the Delta table it last committed (or opened) open: the coordinator reads the new
    version's files right after committing it, and a version's files never change.
    """

    def __init__(self, uri: str, rows_schema: pa.Schema, *, label: str,
                 partition: str = PARTITION) -> None:
        self.uri = uri
        self.rows_schema = rows_schema
        self.label = label  # "job/operator/state", for messages
        self.partition = partition
        self._opened: DeltaTable | None = None

    # -- reading -------------------------------------------------------------------------
    def _open(self, version: int | None) -> DeltaTable:
        if version is not None and self._opened is not None and \
                self._opened.version() == version:
            return self._opened
        try:
            self._opened = DeltaTable(self.uri, version=version)
        except (TableNotFoundError, DeltaError, OSError) as exc:
            raise CorruptSnapshotError(
                f"snapshot table of {self.label} at {self.uri} version {version} cannot be "
                f"opened: {exc}"
            ) from exc
        return self._opened

    def exists(self) -> bool:
        try:
            DeltaTable(self.uri)
        except (TableNotFoundError, DeltaError, OSError):
            return False
        return True

    def files(self, version: int, key_groups: KeyGroupRange | None = None) -> list[TableFile]:
        """The files of ``version`` (only those of ``key_groups`` when given)."""
        return self._files(self._open(version), key_groups)

    def _files(self, table: DeltaTable, key_groups: KeyGroupRange | None = None,
               ) -> list[TableFile]:
        actions = pa.table(table.get_add_actions(flatten=True))
        out = []
        for path, kg, rows, size in zip(
            actions.column("path").to_pylist(),
            actions.column(f"partition.{self.partition}").to_pylist(),
            actions.column("num_records").to_pylist(),
            actions.column("size_bytes").to_pylist(),
        ):
            if key_groups is None or kg in key_groups:
                out.append(TableFile(path, int(kg), int(rows or 0), int(size)))
        return out

    def key_group_sizes(self, version: int) -> dict[int, tuple[int, int]]:
        sizes: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for f in self.files(version):
            sizes[f.key_group][0] += f.rows
            sizes[f.key_group][1] += f.size
        return {kg: (r, b) for kg, (r, b) in sorted(sizes.items())}

    def read_files(self, files: Iterable[TableFile]) -> Iterator[tuple[int, pa.Table]]:
        """``(key_group, rows)`` of each file, read directly (only the files asked for)."""
        for f, rows in read_table_files(self.uri, files, label=f"snapshot of {self.label}"):
            yield f.key_group, rows

    # -- committing ----------------------------------------------------------------------
    def commit(
        self,
        files: Sequence[SnapshotFile],
        *,
        changed_key_groups: Iterable[int],
        base_version: int | None,
        app_id: str,
        checkpoint_id: int,
        replace_all: bool = False,
    ) -> int:
        """Replace ``changed_key_groups`` of ``base_version`` by ``files``; the new version.

        With ``replace_all`` the table becomes exactly ``files``, in ``rows_schema`` (which may
        differ from the table's schema so far).
        """
        partition = self.partition
        schema = key_group_schema(self.rows_schema, partition)
        properties = CommitProperties(app_transactions=[Transaction(app_id, checkpoint_id)])
        adds: list[AddAction | RemoveAction] = [
            AddAction(f.path, f.size, {partition: str(f.key_group)}, f.modification_time, True,
                      f.stats) for f in files]
        try:
            try:
                table = DeltaTable(self.uri)
            except TableNotFoundError:
                table = DeltaTable.create(self.uri, schema, partition_by=[partition],
                                          mode="ignore")
            if base_version is not None and table.version() != base_version:
                table.restore(base_version)
                table.update_incremental()
            if replace_all or base_version is None:  # nothing completed builds on what is there
                table.create_write_transaction(adds, "overwrite", schema,
                                               partition_by=[partition],
                                               commit_properties=properties)
            else:
                changed = set(changed_key_groups) | {f.key_group for f in files}
                now = time.time_ns() // 1_000_000
                actions: list[AddAction | RemoveAction] = [
                    RemoveAction(f.path, True, now, f.size, {partition: str(f.key_group)})
                    for f in self._files(table) if f.key_group in changed
                ]
                actions += adds
                if not actions:
                    return table.version()
                table.create_write_transaction(actions, "append", schema,
                                               partition_by=[partition],
                                               commit_properties=properties)
            table.update_incremental()
        except DeltaError as exc:
            raise CheckpointCommitError(
                f"checkpoint {checkpoint_id}: commit of {self.label} at {self.uri} failed: {exc}"
            ) from exc
        self._opened = table
        return table.version()
