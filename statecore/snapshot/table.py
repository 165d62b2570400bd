"""Driver side: one Delta table per state, committed once per checkpoint, read by version.

A commit replaces exactly the changed key groups: it removes their files of the base version and
adds the new ones in one transaction; every other key group keeps its files (incremental at
key-group granularity). The commit names the checkpoint as a Delta application transaction.
If the table moved past the base version (an earlier attempt failed after committing here), it is
first restored to the base version, so a failed checkpoint leaves nothing a later one builds on;
but never over another writer's commit: that fails the checkpoint instead
(:mod:`statecore.snapshot.foreign`).

A writer's commits carry its lease's fencing epoch (:class:`Fence`) as a second application
transaction, ``statecore-epoch:<job>``: a table that already carries a larger epoch refuses the
commit (:class:`~statecore.errors.ConcurrentRunError`), and two writers committing at once
conflict in Delta's own log (both name the same application id), so a writer that was taken over
never rolls back, nor adds to, the tables of the one that took over.

Every :data:`~statecore.snapshot.log.LOG_CHECKPOINT_INTERVAL` commits, a commit also writes a
Delta log checkpoint (:mod:`statecore.snapshot.log`), so a long stream's tables open in bounded
time.

Operator-state tables are partitioned by ``subtask`` instead and replaced as a whole each
checkpoint; so is a keyed table whose schema migrated (every key group is rewritten).
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.schema import Schema as DeltaSchema
from deltalake.transaction import AddAction, RemoveAction

from statecore.errors import CheckpointCommitError, ConcurrentRunError, CorruptSnapshotError
from statecore.keygroups import KeyGroupRange
from statecore.snapshot import log_commit, open_tables
from statecore.snapshot.commits import CommitMetadata
from statecore.snapshot.files import SnapshotFile
from statecore.snapshot.foreign import RESTORE_METADATA, check_no_foreign
from statecore.snapshot.log import checkpoint_due, checkpoint_log
from statecore.snapshot.reads import TableFile, read_table_files
from statecore.snapshot.storage import POST_COMMIT, create_table, open_table, throttling_hint

__all__ = [
    "Fence",
    "SnapshotTable",
    "TableFile",
    "carried_epoch",
    "key_group_schema",
    "read_table_files",
]

PARTITION = "key_group"


def key_group_schema(rows_schema: pa.Schema, partition: str = PARTITION) -> pa.Schema:
    """The table schema: the rows' columns plus the ``key_group`` (or other) partition column."""
    return rows_schema.append(pa.field(partition, pa.int32(), nullable=False))


@dataclass(frozen=True)
class Fence:
    """The fencing epoch of the writer that holds ``job``'s lease, for its Delta commits.

    ``check`` (when given) asks the catalog whether the lease is still held and raises
    :class:`~statecore.errors.ConcurrentRunError` if not; it runs before every commit.
    """

    job: str
    epoch: int
    check: Callable[[], None] | None = None

    @property
    def app_id(self) -> str:
        return f"statecore-epoch:{self.job}"

    def transaction(self) -> Transaction:
        return Transaction(self.app_id, self.epoch)

    def verify(self, table: DeltaTable | open_tables.OpenTable, label: str) -> None:
        """Refuse to commit to ``table`` when a newer writer's epoch is in it already."""
        if self.check is not None:
            self.check()
        found = table.transaction_version(self.app_id)
        if found is not None and found > self.epoch:
            raise ConcurrentRunError(
                f"{label}: the table carries epoch {found} of a newer writer of job "
                f"{self.job!r}; this writer (epoch {self.epoch}) was taken over and commits "
                "nothing"
            )


def carried_epoch(uri: str, job: str) -> int | None:
    """The largest fencing epoch of ``job``'s writers that the table at ``uri`` carries
    (``None``: no table there, or no fenced commit of the job in it)."""
    try:
        table = open_table(uri)
    except TableNotFoundError:
        return None
    return table.transaction_version(Fence(job, 0).app_id)


def commit_properties(
    app_id: str,
    checkpoint_id: int,
    fence: Fence | None,
    metadata: CommitMetadata | None = None,
) -> CommitProperties:
    """The checkpoint's application transaction (and the writer's epoch), and the checkpoint
    id in the commit's metadata (so a rollback finds the commits of a checkpoint), with what
    ``metadata`` tells of the state (so a lost catalog is recovered from the tables)."""
    transactions = [Transaction(app_id, checkpoint_id)]
    if fence is not None:
        transactions.append(fence.transaction())
    custom = {CHECKPOINT_METADATA: str(checkpoint_id)}
    if metadata is not None:
        custom.update(metadata.to_properties())
    return CommitProperties(app_transactions=transactions, custom_metadata=custom)


def fenced_failure(
    exc: Exception, uri: str, fence: Fence | None, label: str
) -> ConcurrentRunError | None:
    """The :class:`ConcurrentRunError` behind a failed commit, when a newer writer's commit
    made it conflict."""
    if fence is None or not isinstance(exc, CommitFailedError):
        return None
    try:
        fence.verify(open_table(uri), label)
    except ConcurrentRunError as fenced:
        return fenced
    return None


CHECKPOINT_METADATA = "statecore.checkpoint"
"""The key of the checkpoint id in a statecore commit's ``commitInfo``."""


class SnapshotTable:
    """One state's Delta table at ``uri`` with the given row schema.

    It keeps the Delta table it last committed (or opened) open: the coordinator reads the new
    version's files right after committing it, and a version's files never change.
    """

    def __init__(
        self, uri: str, rows_schema: pa.Schema, *, label: str, partition: str = PARTITION
    ) -> None:
        self.uri = uri
        self.rows_schema = rows_schema
        self.label = label  # "job/operator/state", for messages
        self.partition = partition
        self._opened: DeltaTable | None = None

    # -- reading -------------------------------------------------------------------------
    def _open(self, version: int | None) -> DeltaTable:
        if version is not None and self._opened is not None and self._opened.version() == version:
            return self._opened
        try:
            self._opened = open_table(self.uri, version=version)
        except (TableNotFoundError, DeltaError, OSError) as exc:
            raise CorruptSnapshotError(
                f"snapshot table of {self.label} at {self.uri} version {version} cannot be "
                f"opened: {exc}{throttling_hint(exc)}"
            ) from exc
        return self._opened

    def exists(self) -> bool:
        try:
            open_table(self.uri)
        except (TableNotFoundError, DeltaError, OSError):
            return False
        return True

    def files(self, version: int, key_groups: KeyGroupRange | None = None) -> list[TableFile]:
        """The files of ``version`` (only those of ``key_groups`` when given), by key group
        from the driver's kept map when it holds ``version`` (:mod:`.open_tables`), else
        listed from the table's log."""
        kept = open_tables.peek(self.uri)
        if kept is not None and kept.version == version and kept.current(self.uri):
            return [
                f
                for key_group, entries in sorted(kept.files.items())
                if key_groups is None or key_group in key_groups
                for f in entries
            ]
        return self._files(self._open(version), key_groups)

    def _files(
        self,
        table: DeltaTable,
        key_groups: KeyGroupRange | None = None,
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
        append: bool = False,
        fence: Fence | None = None,
        metadata: CommitMetadata | None = None,
    ) -> int:
        """Replace ``changed_key_groups`` of ``base_version`` by ``files``; the new version.

        With ``replace_all`` the table becomes exactly ``files``, in ``rows_schema`` (which may
        differ from the table's schema so far). With ``append`` the files of ``changed_key_groups``
        are removed and ``files`` added beside what their key groups have (a changes table).
        With ``fence``, the commit (and the restore of
        the base version) is refused once a newer writer committed here. ``metadata`` is
        recorded in the commit.
        """
        partition = self.partition
        schema = key_group_schema(self.rows_schema, partition)
        properties = commit_properties(app_id, checkpoint_id, fence, metadata)
        adds: list[AddAction | RemoveAction] = [
            AddAction(
                f.path, f.size, {partition: str(f.key_group)}, f.modification_time, True, f.stats
            )
            for f in files
        ]
        kept = open_tables.take(self.uri)
        if not (replace_all or base_version is None):
            logged = self._commit_logged(
                kept,
                files,
                changed_key_groups,
                base_version,
                append,
                properties,
                fence,
                checkpoint_id,
            )
            if logged is not None:
                return logged
        try:
            table = self._latest(kept)
            if fence is not None:
                fence.verify(table, f"checkpoint {checkpoint_id}: {self.label}")
            if (
                base_version is not None
                and table.version() != base_version
                and check_no_foreign(
                    self.uri,
                    base_version,
                    table.version(),
                    label=self.label,
                    checkpoint=f"checkpoint {checkpoint_id}",
                )
            ):  # only statecore's own commits (an attempt that failed) are undone
                table.restore(
                    base_version,
                    commit_properties=_restore_properties(fence, base_version),
                    post_commithook_properties=POST_COMMIT,
                )
                table.update_incremental()
            whole = replace_all or base_version is None
            if kept is None or kept.table is not table or kept.version != table.version():
                kept = None if whole else self._file_map(table)
            if whole:  # nothing completed builds on what is there
                table.create_write_transaction(
                    adds,
                    "overwrite",
                    schema,
                    partition_by=[partition],
                    commit_properties=properties,
                    post_commithook_properties=POST_COMMIT,
                )
            else:
                assert kept is not None
                changed = set(changed_key_groups)
                if not append:
                    changed |= {f.key_group for f in files}
                now = time.time_ns() // 1_000_000
                actions: list[AddAction | RemoveAction] = [
                    RemoveAction(path, True, now, size, {partition: str(kg)})
                    for kg in sorted(changed)
                    for path, size in ((f.path, f.size) for f in kept.files.get(kg, ()))
                ]
                actions += adds
                if not actions:
                    open_tables.keep(self.uri, kept)
                    self._opened = table
                    return table.version()
                table.create_write_transaction(
                    actions,
                    "append",
                    schema,
                    partition_by=[partition],
                    commit_properties=properties,
                    post_commithook_properties=POST_COMMIT,
                )
            before = table.version()
            table.update_incremental()
        except (DeltaError, OSError) as exc:  # delta-rs raises OSError for storage errors
            fenced = fenced_failure(
                exc, self.uri, fence, f"checkpoint {checkpoint_id}: {self.label}"
            )
            if fenced is not None:
                raise fenced from exc
            raise CheckpointCommitError(
                f"checkpoint {checkpoint_id}: commit of {self.label} at {self.uri} failed: {exc}"
                f"{throttling_hint(exc)}"
            ) from exc
        checkpoint_log(table, self.uri)
        self._opened = table
        version = table.version()
        if version == before + 1:  # only this commit since ``before``: the map follows it
            added = [(f.key_group, f.path, f.rows, f.size) for f in files]
            if kept is None:
                kept = open_tables.OpenTable(table, before, {})
            entry = kept.after(version, () if whole else changed, added, replace_all=whole)
            stamp = open_tables.commit_stamp(self.uri, version)
            open_tables.keep(self.uri, dataclasses.replace(entry, stamp=stamp))
        return version

    def _commit_logged(
        self,
        kept: open_tables.OpenTable | None,
        files: Sequence[SnapshotFile],
        changed_key_groups: Iterable[int],
        base_version: int,
        append: bool,
        properties: CommitProperties,
        fence: Fence | None,
        checkpoint_id: int,
    ) -> int | None:
        """An incremental commit on the kept table's version written by
        :mod:`.log_commit` (the cost of the change alone); its version, or ``None`` when it
        cannot be written so (the caller commits with delta-rs: nothing was written)."""
        if kept is None or kept.version != base_version or not kept.current(self.uri):
            return None
        changed = set(changed_key_groups)
        if not append:
            changed |= {f.key_group for f in files}
        removes = [(kg, f.path, f.size) for kg in sorted(changed) for f in kept.files.get(kg, ())]
        label = f"checkpoint {checkpoint_id}: {self.label}"
        if fence is not None:
            fence.verify(kept, label)
        if not removes and not files:  # nothing changed: no commit, as with delta-rs below
            open_tables.keep(self.uri, kept)
            return base_version
        schema = key_group_schema(self.rows_schema, self.partition)
        if not (
            log_commit.safe_paths([f.path for f in files] + [path for _, path, _ in removes])
            and log_commit.can_write(
                self.uri, kept.table, self.partition, DeltaSchema.from_arrow(schema).to_json()
            )
        ):
            return None
        transactions = {t.app_id: t.version for t in properties.app_transactions or ()}
        entry = log_commit.commit_entry(
            partition=self.partition,
            removes=removes,
            adds=files,
            transactions=transactions,
            metadata=properties.custom_metadata or {},
        )
        version = base_version + 1
        try:
            if not log_commit.write_commit(self.uri, version, entry):
                return None  # another writer's commit is there: delta-rs sorts it out
        except OSError as exc:
            open_tables.keep(self.uri, kept)
            raise CheckpointCommitError(
                f"{label}: commit of version {version} at {self.uri} failed: {exc}"
                f"{throttling_hint(exc)}"
            ) from exc
        added = [(f.key_group, f.path, f.rows, f.size) for f in files]
        entry_after = kept.after(version, changed, added)
        epochs = {**kept.epochs, **transactions}
        if checkpoint_due(self.uri, version):
            kept.table.update_incremental()
            checkpoint_log(kept.table, self.uri)
            epochs = {}
        open_tables.keep(
            self.uri,
            dataclasses.replace(
                entry_after, stamp=open_tables.commit_stamp(self.uri, version), epochs=epochs
            ),
        )
        return version

    def _latest(self, kept: open_tables.OpenTable | None) -> DeltaTable:
        """The table's latest version: ``kept``'s table brought up to date when there is one
        (only the commits after its version are read), else the table opened (or created)."""
        if kept is not None and kept.current(self.uri):
            try:
                kept.table.update_incremental()
                return kept.table
            except (DeltaError, OSError):
                pass  # opened again below, its state read afresh
        try:
            return open_table(self.uri)
        except TableNotFoundError:
            schema = key_group_schema(self.rows_schema, self.partition)
            return create_table(self.uri, schema, partition_by=[self.partition], mode="ignore")

    def _file_map(self, table: DeltaTable) -> open_tables.OpenTable:
        """The files of ``table``'s version by key group (every file listed)."""
        files: dict[int, list[TableFile]] = defaultdict(list)
        for f in self._files(table):
            files[f.key_group].append(f)
        version = table.version()
        return open_tables.OpenTable(
            table,
            version,
            {kg: tuple(v) for kg, v in files.items()},
            open_tables.commit_stamp(self.uri, version),
        )

    def roll_back(self, version: int, *, fence: Fence | None = None) -> bool:
        """Restore the table to ``version`` if it moved past it (commits of a checkpoint that
        never completed); whether it did."""
        try:
            try:
                table = open_table(self.uri)
            except TableNotFoundError:
                return False
            if table.version() <= version:
                return False
            if fence is not None:
                fence.verify(table, f"rollback of {self.label} to version {version}")
            if not check_no_foreign(
                self.uri,
                version,
                table.version(),
                label=self.label,
                checkpoint=f"rollback to version {version}",
            ):
                return False
            table.restore(
                version,
                commit_properties=_restore_properties(fence, version),
                post_commithook_properties=POST_COMMIT,
            )
        except (DeltaError, OSError) as exc:
            raise CheckpointCommitError(
                f"rollback of {self.label} at {self.uri} to version {version} failed: {exc}"
                f"{throttling_hint(exc)}"
            ) from exc
        return True


def _restore_properties(fence: Fence | None, version: int) -> CommitProperties:
    """A statecore RESTORE's commit: its epoch, and its mark (:data:`.foreign.RESTORE_METADATA`)."""
    return CommitProperties(
        app_transactions=None if fence is None else [fence.transaction()],
        custom_metadata={RESTORE_METADATA: str(version)},
    )
