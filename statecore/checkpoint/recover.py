"""The catalog and the warehouse: refusing a catalog that is behind, rebuilding it from Delta.

The Delta logs of a job's tables are the evidence of what was committed: every snapshot commit
names its checkpoint (an application transaction, and the :class:`CommitMetadata` of
:mod:`statecore.snapshot.commits`). A catalog that is empty or lost, or older than the tables
(a restored backup, a wrong ``STATECORE_CATALOG_URL``), would start the job again from empty or
old state and overwrite those tables. So:

- :func:`check_catalog_not_behind` (called when a run plans, and before restores and VACUUM)
  raises :class:`CatalogBehindWarehouseError` when a table's newest commit belongs to a
  checkpoint the catalog does not know, committed after the catalog's latest completed
  checkpoint (or when the catalog has none);
- :func:`recover_catalog` (``statecore catalog recover JOB``) rebuilds the job's rows from the
  logs alone, as Flink recovers a job from its checkpoint directory: the job, its parallelism
  and max parallelism, its registered states with their schemas, and every checkpoint whose
  commits the tables still build on (a ``RESTORE`` undoes a failed checkpoint's commits), each
  with the version of every table of its operator; the pending output commits of the
  checkpoints it records, from the warehouse's record of them
  (:mod:`statecore.checkpoint.output_records`: the catalog that held them is gone); and it
  commits the output of completed checkpoints still pending (:mod:`statecore.checkpoint.outputs`).
  A lost catalog starts the job's lease epochs again, while its tables carry the epochs of its
  writers: recover raises them above the largest one the tables carry first, so the next
  writer is not fenced out as an older one.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from statecore.catalog import (
    Catalog,
    CheckpointKind,
    CheckpointRecord,
    CheckpointStatus,
    PendingOutput,
    StateRecord,
    TableVersion,
)
from statecore.checkpoint.lock import MAINTENANCE_ID_BASE, maintenance_lock
from statecore.checkpoint.output_records import pending_records, pending_records_folder
from statecore.checkpoint.outputs import roll_forward
from statecore.checkpoint.points import RestorePoint
from statecore.config import StatecoreConfig
from statecore.errors import (
    CatalogBehindWarehouseError,
    CheckpointNotFoundError,
    CorruptSnapshotError,
)
from statecore.progress import Progress, silent
from statecore.snapshot import Fence, state_table_uri
from statecore.snapshot.changelog import CHANGES
from statecore.snapshot.commits import (
    CommitMetadata,
    TableCommit,
    head_version,
    job_table_uris,
    last_commit,
    live_commits,
)
from statecore.snapshot.rewrite import partition_sizes
from statecore.snapshot.table import carried_epoch

__all__ = [
    "CatalogRecovery",
    "RecoveredCheckpoint",
    "check_catalog_not_behind",
    "commit_metadata",
    "recover_catalog",
    "scan_warehouse",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RecoveredCheckpoint:
    """A checkpoint as the Delta logs show it committed."""

    checkpoint_id: int
    kind: CheckpointKind
    parallelism: int
    max_parallelism: int
    committed_at: datetime
    tables: tuple[TableVersion, ...]
    watermark: int | None = None


@dataclass(frozen=True, kw_only=True)
class CatalogRecovery:
    """What :func:`recover_catalog` found in the warehouse and recorded (or would, dry run)."""

    job: str
    dry_run: bool
    parallelism: int
    max_parallelism: int
    states: tuple[StateRecord, ...]
    checkpoints: tuple[RecoveredCheckpoint, ...]
    recorded: tuple[int, ...]

    def rows(self) -> list[dict[str, Any]]:
        """One row per checkpoint found, for the command's table."""
        return [
            {
                "job": self.job,
                "checkpoint_id": c.checkpoint_id,
                "kind": c.kind.name,
                "parallelism": c.parallelism,
                "max_parallelism": c.max_parallelism,
                "tables": len(c.tables),
                "rows": sum(t.rows for t in c.tables),
                "committed_at": f"{c.committed_at:%Y-%m-%d %H:%M:%S}",
                "recorded": c.checkpoint_id in self.recorded,
            }
            for c in self.checkpoints
        ]


def check_catalog_not_behind(
    config: StatecoreConfig,
    catalog: Catalog,
    job: str,
    *,
    latest: CheckpointRecord | None = None,
) -> None:
    """Refuse to go on when the job's tables hold commits the catalog does not know.

    :class:`CatalogBehindWarehouseError` names the tables and their checkpoints. A table whose
    latest version is the one the latest completed checkpoint names costs one listing of its
    Delta log; for the others, the newest commit is read. Commits of checkpoints the catalog
    knows (in any status) and commits older than its latest completed checkpoint (e.g. of a
    FAILED checkpoint retention forgot) are not evidence. ``latest`` is the job's latest
    completed checkpoint when the caller has read it already.
    """
    uris = job_table_uris(config.warehouse, job)
    if not uris:
        return
    if latest is None and catalog.has_job(job):
        latest = catalog.latest_restorable(job)
    named = {t.path.rstrip("/"): t.version for t in (latest.tables if latest else ())}
    last_done = latest.completed_at if latest else None
    evidence = []
    for uri in uris:
        head = head_version(uri)
        if head is None or named.get(uri) == head:
            continue
        version, commit = last_commit(uri)
        if version is None:
            continue
        if commit is None:  # not written with commit metadata: any data is evidence
            if last_done is None and version > 0:
                evidence.append(f"{uri} (version {version})")
            continue
        if last_done is not None and commit.timestamp <= last_done:
            continue
        checkpoint_id = commit.metadata.checkpoint_id
        if catalog.checkpoint_status(job, checkpoint_id) is None:  # unknown job or checkpoint
            evidence.append(f"{uri} (version {version}, checkpoint {checkpoint_id})")
    if evidence:
        state = (
            f"knows checkpoints up to {last_done:%Y-%m-%d %H:%M:%S} UTC"
            if last_done is not None
            else "has no completed checkpoint"
        )
        raise CatalogBehindWarehouseError(
            f"job {job!r}: the catalog {state}, but its Delta tables hold later commits: "
            f"{', '.join(evidence)}. Going on would start from older state and overwrite them; "
            f"nothing was written. Rebuild the catalog from the tables with `statecore catalog "
            f"recover {job}` (or point STATECORE_CATALOG_URL at the job's catalog)"
        )


def commit_metadata(
    point: RestorePoint, table: TableVersion, checkpoint_id: int
) -> CommitMetadata | None:
    """What a maintenance commit of ``table`` (of ``point``, as checkpoint ``checkpoint_id``)
    records; ``None`` when the point does not describe the table's state."""
    state = point.state(table)
    if state is None:
        return None
    return CommitMetadata(
        checkpoint_id=checkpoint_id,
        operator=table.operator,
        state=table.state,
        table_kind=table.table_kind,
        kind=state.kind,
        schema=state.schema,
        descriptor=dict(state.descriptor),
        ttl=None if state.ttl is None else dict(state.ttl),
        parallelism=point.parallelism,
        max_parallelism=point.max_parallelism,
        watermark=point.watermark,
    )


def _checkpoint_kind(checkpoint_id: int) -> CheckpointKind:
    return (
        CheckpointKind.MAINTENANCE
        if checkpoint_id >= MAINTENANCE_ID_BASE
        else CheckpointKind.CHECKPOINT
    )


def scan_warehouse(config: StatecoreConfig, job: str) -> CatalogRecovery:
    """The job's catalog rows as the Delta logs of its tables show them (nothing written)."""
    uris = job_table_uris(config.warehouse, job)
    by_table: dict[tuple[str, str, str], list[TableCommit]] = {}
    for uri in uris:
        live, unrecorded = live_commits(uri)
        if unrecorded:
            raise CorruptSnapshotError(
                f"job {job!r}: table {uri} versions {unrecorded} were committed without "
                "statecore's commit metadata (by an older statecore or another writer); the "
                "catalog cannot be rebuilt exactly from them"
            )
        if live:
            meta = live[-1].metadata
            by_table[meta.operator, meta.table_kind, meta.state] = live
    if not by_table:
        raise CheckpointNotFoundError(
            f"job {job!r}: no table below {config.warehouse.rstrip('/')}/{job} holds a "
            "checkpoint: nothing to recover"
        )
    first_commit: dict[int, TableCommit] = {}
    for commits in by_table.values():
        for c in commits:
            seen = first_commit.get(c.metadata.checkpoint_id)
            if seen is None or c.timestamp < seen.timestamp:
                first_commit[c.metadata.checkpoint_id] = c
    order = sorted(first_commit, key=lambda i: (first_commit[i].timestamp, i))
    rank = {checkpoint_id: n for n, checkpoint_id in enumerate(order)}
    operators_of: dict[int, set[str]] = defaultdict(set)
    for (operator, _, _), commits in by_table.items():
        for c in commits:
            operators_of[c.metadata.checkpoint_id].add(operator)
    checkpoints = []
    for checkpoint_id in order:
        tables = []
        for (operator, table_kind, state), commits in sorted(by_table.items()):
            if operator not in operators_of[checkpoint_id]:
                continue
            upto = [c for c in commits if rank[c.metadata.checkpoint_id] <= rank[checkpoint_id]]
            if not upto:
                continue  # the table did not exist yet
            version = upto[-1].version
            sizes = partition_sizes(upto[-1].uri, version)
            tables.append(
                TableVersion(
                    operator=operator,
                    state=state,
                    table_kind=table_kind,
                    path=state_table_uri(config.warehouse, job, operator, table_kind, state),
                    version=version,
                    rows=sum(r for r, _ in sizes.values()),
                    bytes=sum(b for _, b in sizes.values()),
                    key_groups=sizes,
                )
            )
        meta = first_commit[checkpoint_id].metadata
        marks = [
            c.metadata.watermark
            for commits in by_table.values()
            for c in commits
            if c.metadata.checkpoint_id == checkpoint_id and c.metadata.watermark is not None
        ]
        checkpoints.append(
            RecoveredCheckpoint(
                checkpoint_id=checkpoint_id,
                kind=_checkpoint_kind(checkpoint_id),
                parallelism=meta.parallelism,
                max_parallelism=meta.max_parallelism,
                committed_at=first_commit[checkpoint_id].timestamp,
                tables=tuple(tables),
                watermark=max(marks, default=None),
            )
        )
    states = tuple(
        StateRecord(
            job=job,
            operator=operator,
            name=state,
            kind=commits[-1].metadata.kind,
            descriptor=commits[-1].metadata.descriptor,
            schema=commits[-1].metadata.schema,
            ttl=commits[-1].metadata.ttl,
        )
        for (operator, table_kind, state), commits in sorted(by_table.items())
        if table_kind != CHANGES  # a changes table's commits describe its rows, not the state
    )
    last = checkpoints[-1]
    return CatalogRecovery(
        job=job,
        dry_run=True,
        parallelism=last.parallelism,
        max_parallelism=last.max_parallelism,
        states=states,
        checkpoints=tuple(checkpoints),
        recorded=(),
    )


def _warn_unresolved(
    records: dict[int, list[PendingOutput]],
    found: CatalogRecovery,
    config: StatecoreConfig,
    progress: Progress,
) -> None:
    """Say loudly which recorded output no table shows the checkpoint of: it stays pending in
    the warehouse, neither committed nor deleted."""
    job = found.job
    known = {c.checkpoint_id for c in found.checkpoints}
    for checkpoint_id in sorted(set(records) - known):
        uris = ", ".join(sorted({o.uri for o in records[checkpoint_id]}))
        message = (
            f"WARNING: catalog recover {job}: checkpoint {checkpoint_id} recorded output files "
            f"for {uris}, but no state table of the job shows the checkpoint committed (it "
            "failed before its state commits, or changed no state): its output is neither "
            f"committed nor deleted; its record stays in "
            f"{pending_records_folder(config.warehouse, job)}"
        )
        log.warning("%s", message)
        progress(message)


def recover_catalog(
    config: StatecoreConfig,
    catalog: Catalog,
    job: str,
    *,
    dry_run: bool = False,
    progress: Progress = silent,
) -> CatalogRecovery:
    """Record in ``catalog`` what the Delta logs of ``job``'s tables show: the job, its states
    and every checkpoint the catalog does not know as completed (in the order they committed),
    each with the pending output commits the warehouse records for it; then commit every
    pending output (once). Checkpoints it knows are left as they are. The job's parallelism
    becomes the latest checkpoint's. A recorded output of a checkpoint no table shows is left
    as it is, with a warning."""
    found = scan_warehouse(config, job)
    known = catalog.has_job(job)
    existing = (
        {c.checkpoint_id: c.status for c in catalog.list_checkpoints(job, with_tables=False)}
        if known
        else {}
    )
    missing = [
        c
        for c in found.checkpoints
        if existing.get(c.checkpoint_id)
        not in (CheckpointStatus.COMPLETED, CheckpointStatus.EXPIRED)
    ]
    recorded = tuple(c.checkpoint_id for c in missing)
    progress(
        f"catalog recover {job}: {len(found.checkpoints)} checkpoints in the Delta logs, "
        f"{len(missing)} {'to record' if dry_run else 'recorded'}: {list(recorded)}"
    )
    if dry_run:
        return replace(found, recorded=recorded)
    records = pending_records(config.warehouse, job)
    catalog.ensure_job(job, parallelism=found.parallelism, max_parallelism=found.max_parallelism)
    # a lost catalog starts epochs again: its leases must fence above what the tables carry
    output_uris = sorted({o.uri for pending in records.values() for o in pending})
    uris = [*job_table_uris(config.warehouse, job), *output_uris]
    carried = [e for e in (carried_epoch(uri, job) for uri in uris) if e is not None]
    catalog.raise_lease_epoch(job, at_least=max(carried, default=0))
    with maintenance_lock(catalog, job, "catalog-recover") as lease:
        for operator in sorted({s.operator for s in found.states}):
            catalog.register_states(
                job, operator, [s for s in found.states if s.operator == operator]
            )
        previous: int | None = None
        for checkpoint in found.checkpoints:
            if checkpoint in missing:
                catalog.begin_checkpoint(
                    job,
                    checkpoint.checkpoint_id,
                    kind=checkpoint.kind,
                    parallelism=checkpoint.parallelism,
                    max_parallelism=checkpoint.max_parallelism,
                    restored_from=previous,
                    epoch=lease.epoch,
                )
                outputs = records.get(checkpoint.checkpoint_id, [])
                if outputs:  # its output had not been committed yet: pending again
                    catalog.record_pending_outputs(
                        job, checkpoint.checkpoint_id, outputs, epoch=lease.epoch
                    )
                catalog.complete_checkpoint(
                    job,
                    checkpoint.checkpoint_id,
                    tables=checkpoint.tables,
                    epoch=lease.epoch,
                    watermark=checkpoint.watermark,
                )
            previous = checkpoint.checkpoint_id
        catalog.set_job_parallelism(
            job, parallelism=found.parallelism, max_parallelism=found.max_parallelism
        )
        _warn_unresolved(records, found, config, progress)
        rolled = roll_forward(
            catalog,
            job,
            Fence(job, lease.epoch, lambda: catalog.check_lease(job, epoch=lease.epoch)),
            warehouse=config.warehouse,
        )
        if rolled:
            progress(
                f"catalog recover {job}: committed the pending output of checkpoints "
                f"{sorted({p.checkpoint_id for p in rolled})}"
            )
    return replace(found, dry_run=False, recorded=recorded)
