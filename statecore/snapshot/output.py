"""A job's output as a Delta table, appended exactly once per checkpoint.

Flink's two-phase-commit sinks, on Delta: each task writes its output rows as Parquet files in a
staging folder outside the table (where no Delta tool lists or VACUUMs them,
:mod:`statecore.snapshot.output_staging`), and reports them with its snapshot; the checkpoint
records them as its pending output commits, completes, and only then are they copied into the
table's folder, committed in one Delta transaction that records the checkpoint id as the job's
application transaction version (:mod:`statecore.checkpoint.outputs`). A commit repeated after
it was made (a roll-forward after a crash) finds the version recorded and commits nothing, so
each checkpoint's rows are in the table once; a checkpoint that never completes never commits.
The rows of one checkpoint are read back alone through the Delta log (the files its commit
added, :mod:`statecore.snapshot.output_rows`), whatever another tool's OPTIMIZE did to the
files' names; a file's name also carries its checkpoint id, which statecore's own VACUUM and
merge of expired checkpoints (:mod:`statecore.snapshot.output_compaction`) go by.

Each commit also carries the writer's fencing epoch (see :mod:`statecore.snapshot.table`) and
names its checkpoint in the commit's metadata. The table only ever gets appends (and the
maintenance's merges, which change no data): nothing RESTOREs it, so a Delta streaming reader of
it never meets a data-changing remove. Like the state tables, it gets a Delta log checkpoint
every :data:`~statecore.snapshot.log.LOG_CHECKPOINT_INTERVAL` commits.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable, Schema
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.transaction import AddAction

from statecore.errors import CheckpointCommitError, ConfigError
from statecore.snapshot.commits import head_version
from statecore.snapshot.faults import fault_point
from statecore.snapshot.files import delta_stats, stat_columns, table_filesystem
from statecore.snapshot.locations import canonical_location
from statecore.snapshot.log import checkpoint_log
from statecore.snapshot.output_owner import check_owner, claim
from statecore.snapshot.output_rows import checkpoint_output_uris
from statecore.snapshot.output_staging import (
    StagedFile,
    drop_staged,
    place_files,
    verify_placed,
)
from statecore.snapshot.storage import POST_COMMIT, create_table, open_table, throttling_hint
from statecore.snapshot.table import (
    CHECKPOINT_METADATA,
    Fence,
    commit_properties,
    fenced_failure,
)

__all__ = [
    "OutputFile",
    "OutputTable",
    "OutputWriter",
    "checkpoint_of_file",
    "newest_checkpoint_commit",
    "output_schema",
    "output_schema_text",
    "output_table_key",
    "output_version_at",
    "output_versions_at",
]

log = logging.getLogger(__name__)


def _prefix(checkpoint_id: int) -> str:
    return f"part-cp{checkpoint_id:012d}-"


_CHECKPOINT_FILE = re.compile(r"^part-cp(\d{12})-")


def output_schema_text(schema: pa.Schema) -> str:
    """``schema`` as text (Arrow IPC, base64), to record with a pending output commit."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def output_schema(text: str) -> pa.Schema:
    """The schema :func:`output_schema_text` wrote."""
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def output_table_key(uri: str) -> str:
    """The name the catalog binds an output table by: one name for one table however it is
    written (:func:`~statecore.snapshot.locations.canonical_location`)."""
    return canonical_location(uri)


def checkpoint_of_file(name: str) -> int | None:
    """The checkpoint whose output the file ``name`` holds (``None``: not a checkpoint's file,
    e.g. a merged one)."""
    found = _CHECKPOINT_FILE.match(name)
    return None if found is None else int(found.group(1))


@dataclass(frozen=True, kw_only=True)
class OutputFile:
    """A written, not yet committed, output file: ``path`` is its path relative to the table
    root once committed, ``staged`` the URI of the copy the task wrote (``None``: written into
    the table's folder, by a statecore that did not stage output yet)."""

    path: str
    rows: int
    size: int
    modification_time: int
    stats: str
    staged: str | None = None

    @property
    def staged_file(self) -> StagedFile:
        return StagedFile(self.path, self.size, self.staged)

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)


ROW_GROUP_ROWS = 1024 * 1024
"""The most rows in one row group of an output file (Arrow's default)."""
ROW_GROUP_BYTES = 16 * 1024 * 1024
"""About the most Arrow data an :class:`OutputWriter` gathers before it writes a row group:
Spark hands a task batches of 10,000 rows, and a row group per batch encodes each column's
dictionary (a string key's) again every 10,000 rows; a task's 1,000,000 rows of the benchmark
write in about half the time as two row groups, into a file 20 % smaller."""


class OutputWriter:
    """Executor side: a task's output batches, streamed into one Parquet file whose footer
    gives the Delta statistics (as for snapshot files), written into the ``staging`` folder
    (into the table's folder without one), a row group per :data:`ROW_GROUP_BYTES` of rows."""

    def __init__(
        self,
        table_uri: str,
        schema: pa.Schema,
        *,
        checkpoint_id: int,
        subtask: int,
        staging: str | None = None,
    ) -> None:
        self._staging = None if staging is None else staging.rstrip("/")
        self._fs, self._root = table_filesystem(self._staging or table_uri)
        self._schema = schema
        self._columns = stat_columns(schema)
        self._relative = f"{_prefix(checkpoint_id)}{subtask:05d}-{uuid.uuid4().hex[:12]}.parquet"
        self._sink: Any = None
        self._writer: pq.ParquetWriter | None = None
        self._footer: list[pq.FileMetaData] = []
        self._rows = 0
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._pending_bytes = 0

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def write(self, batch: pa.RecordBatch) -> None:
        """Add ``batch``'s rows to the file: gathered into row groups of up to
        :data:`ROW_GROUP_ROWS` rows or about :data:`ROW_GROUP_BYTES` of Arrow data, in order."""
        if batch.num_rows == 0:
            return
        if not batch.schema.equals(self._schema, check_metadata=False):
            raise ValueError(  # as Parquet's writer says it, when the batch comes (not later)
                "Table schema does not match schema used to create file: \n"
                f"table:\n{batch.schema!s} vs. \nfile:\n{self._schema!s}"
            )
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        self._pending_bytes += batch.nbytes
        if self._pending_rows >= ROW_GROUP_ROWS or self._pending_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        """Write the gathered batches as one row group (more when over :data:`ROW_GROUP_ROWS`)."""
        if not self._pending:
            return
        if self._writer is None:
            self._fs.create_dir(self._root, recursive=True)
            self._sink = self._fs.open_output_stream(f"{self._root}/{self._relative}")
            self._writer = pq.ParquetWriter(  # snappy: Spark's and Delta's default codec
                self._sink,
                self._schema,
                compression="snappy",
                write_statistics=self._columns or False,
                metadata_collector=self._footer,
            )
        self._writer.write_table(
            pa.Table.from_batches(self._pending, schema=self._schema),
            row_group_size=ROW_GROUP_ROWS,
        )
        self._rows += self._pending_rows
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0

    def close(self) -> OutputFile | None:
        """Finish the file; ``None`` when the task had no output."""
        self._flush()
        if self._writer is None:
            return None
        self._writer.close()
        size = self._sink.tell()
        self._sink.close()
        return OutputFile(
            path=self._relative,
            rows=self._rows,
            size=size,
            modification_time=time.time_ns() // 1_000_000,
            stats=delta_stats(self._rows, self._footer[0], self._columns),
            staged=None if self._staging is None else f"{self._staging}/{self._relative}",
        )

    def abort(self) -> None:
        """Drop the file of a failed attempt (and the rows not written yet)."""
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._fs.delete_file(f"{self._root}/{self._relative}")


class OutputTable:
    """Driver side: the job's output table at ``uri``, rows of ``schema``, written by
    ``app_id`` (its owner, :mod:`statecore.snapshot.output_owner`) of the home whose warehouse
    is ``warehouse`` (when known, named in the table for messages)."""

    def __init__(
        self, uri: str, schema: pa.Schema, *, app_id: str, warehouse: str | None = None
    ) -> None:
        self.uri = uri
        self.schema = schema
        self.app_id = app_id
        self.warehouse = warehouse
        self._opened: DeltaTable | None = None

    def _table(self) -> DeltaTable | None:
        """The table at its latest version (``None`` while it does not exist). Opened once per
        run: later calls read only the commits added since (a run opens it three times)."""
        try:
            if self._opened is None:
                self._opened = open_table(self.uri)
            else:
                self._opened.update_incremental()
            return self._opened
        except TableNotFoundError:
            return None
        except (DeltaError, OSError) as exc:
            self._opened = None
            raise ConfigError(f"output table {self.uri} cannot be opened: {exc}") from exc

    def check_schema(self) -> None:
        """Raise :class:`ConfigError` when the table exists with other columns or types."""
        table = self._table()
        if table is None:
            return
        existing, mine = table.schema(), Schema.from_arrow(self.schema)
        if [(f.name, f.type) for f in existing.fields] != [(f.name, f.type) for f in mine.fields]:
            raise ConfigError(
                f"output table {self.uri} has the schema {existing}, the job's "
                f"output schema is {mine}; write to another table"
            )

    def check_owner(self) -> None:
        """Raise :class:`~statecore.errors.TableOwnedError` when the table is another writer's
        (:func:`~statecore.snapshot.output_owner.check_owner`)."""
        check_owner(
            self._table(),
            self.uri,
            self.app_id,
            where=f"the output table {self.uri}",
            warehouse=self.warehouse,
        )

    def commit(
        self, files: list[OutputFile], *, checkpoint_id: int, fence: Fence | None = None
    ) -> bool:
        """Append ``files`` as the output of ``checkpoint_id``, a checkpoint that completed;
        ``False`` when that checkpoint's output is already in the table (an earlier attempt of
        this commit made it: the files are those it committed). With ``fence``, the commit is
        refused (:class:`~statecore.errors.ConcurrentRunError`) once a newer writer of the job
        committed here, or its lease is lost.

        The staged files are copied into the table first (the steps of
        :mod:`statecore.snapshot.output_staging`): every file is checked there at its recorded
        size before the commit (:class:`~statecore.errors.OutputFilesMissingError` names those
        gone, and nothing is committed) and again after it, repaired from its staged copy if a
        VACUUM deleted it meanwhile; only then are the staged copies deleted. A commit found
        made checks and repairs the same way, so a roll-forward after a kill at any step ends
        with every file in the table and none staged."""
        table = self._table()
        where = f"checkpoint {checkpoint_id}: the output table {self.uri}"
        if table is not None and fence is not None:
            fence.verify(table, where)
        done = None if table is None else table.transaction_version(self.app_id)
        staged = [f.staged_file for f in files]
        made = done is None or done < checkpoint_id
        if made and check_owner(
            table, self.uri, self.app_id, where=where, warehouse=self.warehouse
        ):
            assert table is not None
            claim(table, self.app_id, where=where, warehouse=self.warehouse)
        try:
            if made:
                place_files(self.uri, staged, where=where)
                table = self._append(table, files, checkpoint_id, fence, where)
            repaired = verify_placed(
                self.uri, staged, where=where, referenced=lambda: self._referenced()
            )
            for f in repaired:
                log.warning(
                    "%s: %s was gone after the commit; copied again from %s",
                    where,
                    f.path,
                    f.staged,
                )
            fault_point("output:staged:drop")
            drop_staged(staged)
        except OSError as exc:
            raise CheckpointCommitError(
                f"{where}: the pending files cannot be put into the table: "
                f"{exc}{throttling_hint(exc)}"
            ) from exc
        return made

    def _referenced(self) -> set[str]:
        """The paths (relative to the root) of the files of the table's latest version."""
        table = self._table()
        if table is None:
            return set()
        paths = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
        return {unquote(p) for p in paths}

    def _append(
        self,
        table: DeltaTable | None,
        files: list[OutputFile],
        checkpoint_id: int,
        fence: Fence | None,
        where: str,
    ) -> DeltaTable:
        """The Delta commit of ``files`` (the table created first if need be)."""
        properties = commit_properties(self.app_id, checkpoint_id, fence)
        fault_point("output:commit:before")
        try:
            if table is None:
                table = self._opened = create_table(self.uri, self.schema, mode="ignore")
                if fence is not None:
                    fence.verify(table, where)
                # Delta refuses properties it does not know at creation, not after: the owner is
                # recorded next (unless another writer created the table meanwhile)
                if check_owner(table, self.uri, self.app_id, where=where):
                    claim(table, self.app_id, where=where, warehouse=self.warehouse)
            table.create_write_transaction(
                [AddAction(f.path, f.size, {}, f.modification_time, True, f.stats) for f in files],
                "append",
                self.schema,
                commit_properties=properties,
                post_commithook_properties=POST_COMMIT,
            )
        except (DeltaError, OSError) as exc:  # delta-rs raises OSError for storage errors
            fenced = fenced_failure(exc, self.uri, fence, where)
            if fenced is not None:
                raise fenced from exc
            raise CheckpointCommitError(
                f"{where}: commit failed: {exc}{throttling_hint(exc)}"
            ) from exc
        fault_point("output:commit:after")
        try:
            table.update_incremental()
        except (DeltaError, OSError) as exc:  # committed: only the log checkpoint is skipped
            log.warning("%s: reading the new version back failed: %s", where, exc)
        else:
            checkpoint_log(table, self.uri)
        return table

    def delete(self, files: list[OutputFile]) -> None:
        """Delete files that were never committed, staged or (written before staging) in the
        table's folder (gone already: nothing to do)."""
        fs, root = table_filesystem(self.uri)
        for f in files:
            if f.staged is not None:
                drop_staged([f.staged_file])
                continue
            try:
                fs.delete_file(f"{root}/{f.path}")
            except FileNotFoundError:
                pass

    def checkpoint_files(self, checkpoint_id: int) -> list[str]:
        """URIs of the files holding exactly the output of ``checkpoint_id``, found through the
        Delta log (:func:`~statecore.snapshot.output_rows.checkpoint_output_uris`: another
        tool's OPTIMIZE or RESTORE is taken into account, or named in the error)."""
        return checkpoint_output_uris(self.uri, checkpoint_id)


def _commit_checkpoint(fs: pafs.FileSystem, path: str) -> tuple[bool, int | None]:
    """Whether the commit file at ``path`` exists, and the checkpoint its ``commitInfo`` names
    (``None``: a RESTORE, the creation, a commit of another writer)."""
    try:
        with fs.open_input_stream(path) as f:
            lines = f.read().decode().splitlines()
    except FileNotFoundError:
        return False, None
    for line in lines:
        info = json.loads(line).get("commitInfo") if line.strip() else None
        if isinstance(info, dict) and info.get(CHECKPOINT_METADATA) is not None:
            return True, int(info[CHECKPOINT_METADATA])
    return True, None


def newest_checkpoint_commit(uri: str) -> int | None:
    """The checkpoint of the newest commit of the table at ``uri`` that names one (merges and
    RESTOREs name none); ``None`` when the log holds none (or no table)."""
    head = head_version(uri)
    fs, root = table_filesystem(uri)
    for version in range(-1 if head is None else head, -1, -1):
        exists, committed = _commit_checkpoint(fs, f"{root}/_delta_log/{version:020d}.json")
        if not exists:
            return None
        if committed is not None:
            return committed
    return None


def output_version_at(uri: str, checkpoint_id: int) -> int | None:
    """The version of the output (or late-data) table at ``uri`` as checkpoint
    ``checkpoint_id`` left it: the newest version committed by a checkpoint at or below it.
    The commit files are read from the latest version down, so only the commits of later
    checkpoints are read; ``None`` when the log holds no such commit any more (or no table)."""
    return output_versions_at(uri, [checkpoint_id])[checkpoint_id]


def output_versions_at(uri: str, checkpoint_ids: Iterable[int]) -> dict[int, int | None]:
    """:func:`output_version_at` of each of ``checkpoint_ids``, in one read of the commit files
    from the latest version down to the oldest checkpoint's."""
    wanted = sorted(set(checkpoint_ids), reverse=True)
    found: dict[int, int | None] = dict.fromkeys(wanted)
    head = head_version(uri)
    fs, root = table_filesystem(uri)
    pending = iter(wanted)
    checkpoint = next(pending, None)
    for version in range(-1 if head is None else head, -1, -1):
        if checkpoint is None:
            break
        exists, committed = _commit_checkpoint(fs, f"{root}/_delta_log/{version:020d}.json")
        if not exists:
            break
        while checkpoint is not None and committed is not None and committed <= checkpoint:
            found[checkpoint] = version
            checkpoint = next(pending, None)
    return found
