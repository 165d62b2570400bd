"""Checkpoint retention: keep the last N completed checkpoints, expire the rest, VACUUM.

First, under the job's lease, the output of completed checkpoints that is still pending (its
commit failed, or its writer died after the completion) is rolled forward
(:func:`~statecore.checkpoint.outputs.roll_forward`), so a paused job's completed output reaches
its tables on the maintenance schedule, not at its next run. Each pending commit is logged first
(which checkpoint, which table, since when and why: :mod:`statecore.ops.pending`), then what was
committed; a commit that fails (a staged file gone, say) is logged and raised, naming the
checkpoint and the files missing, and retention does nothing else.

Expired checkpoints stay in the catalog as EXPIRED (their id still replays as a no-op) but name
no table any more. VACUUM then deletes, in every table below ``<warehouse>/<job>/``, the data
files that no retained checkpoint's table version references (nor the table's latest version),
once they are older than a grace period. Whatever the grace period, VACUUM keeps every file a
checkpoint in progress may reference: each file written since the earliest IN_PROGRESS checkpoint
began (less :data:`MAX_CLOCK_SKEW`, as the catalog's clock, the writer's and the storage's may
disagree), and every file of a table version committed after the latest completed checkpoint (a
run commits its tables before the catalog completes it), and every file of a table version a
pinned savepoint keeps (:func:`~statecore.checkpoint.points.pinned_tables`) until the pin is
deleted. Exported savepoints live in folders of their own and are never touched.

Last, the Delta logs of the tables are cut to what the retained checkpoints need
(:func:`statecore.checkpoint.retain.clean_logs`: entries below the newest log checkpoint at or
below the oldest version a retained checkpoint names, once older than ``log_grace``), as a run's
own retention does; ``outputs`` names the job's output and late-data tables, which the catalog
does not know (the job's configuration does: ``keyed_process(output_table=...)``). Each must be
a Delta table and none of the job's state tables, or retention refuses before it changes
anything: a mistyped path would otherwise leave an output log uncut without a word.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from statecore.catalog import Catalog, CheckpointKind, CheckpointRecord, CheckpointStatus
from statecore.checkpoint.lock import maintenance_lock
from statecore.checkpoint.output_records import delete_staged_checkpoint, unrecorded_staging
from statecore.checkpoint.outputs import roll_forward
from statecore.checkpoint.points import pinned_tables
from statecore.checkpoint.recover import check_catalog_not_behind
from statecore.checkpoint.retain import clean_logs
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError, StateError
from statecore.ops.pending import pending_output_status
from statecore.progress import Progress, silent
from statecore.snapshot.commits import head_version, job_table_uris
from statecore.snapshot.log import LOG_GRACE, LogCleanup
from statecore.snapshot.output import output_versions_at
from statecore.snapshot.output_compaction import OutputCompaction, compact_output
from statecore.snapshot.output_owner import check_job_owns
from statecore.snapshot.rewrite import VacuumResult, vacuum, versions_since
from statecore.snapshot.table import Fence

__all__ = [
    "DEFAULT_VACUUM_GRACE",
    "MAX_CLOCK_SKEW",
    "RetentionReport",
    "apply_retention",
    "job_tables",
    "vacuum_job",
]

DEFAULT_VACUUM_GRACE = timedelta(days=7)
"""As Delta's default retention: files younger than this are never vacuumed."""

MAX_CLOCK_SKEW = timedelta(minutes=10)
"""How far the clocks of the catalog's writers, the storage and this host may disagree: files
modified up to this long before a checkpoint in progress began are kept too."""

_WHERE = "its output_table= and late_output_table="
"""Where a job names its output tables, for messages."""


@dataclass(frozen=True, kw_only=True)
class RetentionReport:
    """What retention kept, expired, deleted and vacuumed (or would, in a dry run)."""

    job: str
    dry_run: bool
    retained: tuple[int, ...]
    expired: tuple[int, ...]
    deleted_failed: tuple[int, ...]
    vacuumed: tuple[VacuumResult, ...] = field(default=())
    logs: tuple[LogCleanup, ...] = field(default=())
    compacted: tuple[OutputCompaction, ...] = field(default=())
    rolled_forward: tuple[int, ...] = field(default=())
    """The completed checkpoints whose pending output was committed (a dry run: is pending)."""

    @property
    def files_deleted(self) -> int:
        return sum(len(v.files) for v in self.vacuumed)

    @property
    def log_files_deleted(self) -> int:
        return sum(len(c.files) for c in self.logs)

    @property
    def bytes_reclaimed(self) -> int:
        return sum(v.bytes for v in self.vacuumed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "dry_run": self.dry_run,
            "retained": list(self.retained),
            "expired": list(self.expired),
            "deleted_failed": list(self.deleted_failed),
            "rolled_forward": list(self.rolled_forward),
            "files_deleted": self.files_deleted,
            "log_files_deleted": self.log_files_deleted,
            "bytes_reclaimed": self.bytes_reclaimed,
            "tables": [
                {"path": v.uri, "files": len(v.files), "bytes": v.bytes}
                for v in self.vacuumed
                if v.files
            ],
            "compacted": [
                {"path": c.uri, "files_merged": c.removed, "files_written": c.added}
                for c in self.compacted
                if c.removed
            ],
        }


def _completed(catalog: Catalog, job: str) -> list[CheckpointRecord]:
    done = catalog.list_checkpoints(job, status=CheckpointStatus.COMPLETED, with_sizes=False)
    return sorted(done, key=lambda c: (c.completed_at is None, c.completed_at, c.checkpoint_id))


def job_tables(config: StatecoreConfig, job: str) -> list[str]:
    """Every Delta table below ``<warehouse>/<job>/`` (``<operator>/<kind>/<state>`` and
    ``<operator>/timers``), whether a checkpoint still names it or not."""
    return job_table_uris(config.warehouse, job)


def vacuum_job(
    config: StatecoreConfig,
    catalog: Catalog,
    job: str,
    *,
    older_than: timedelta = DEFAULT_VACUUM_GRACE,
    dry_run: bool = False,
    progress: Progress = silent,
) -> list[VacuumResult]:
    """Delete the files of ``job``'s tables that no completed checkpoint needs. No lock taken."""
    return _vacuum(
        config,
        catalog,
        job,
        _completed(catalog, job),
        older_than=older_than,
        dry_run=dry_run,
        progress=progress,
    )


def _vacuum(
    config: StatecoreConfig,
    catalog: Catalog,
    job: str,
    retained: list[CheckpointRecord],
    *,
    older_than: timedelta,
    dry_run: bool,
    progress: Progress,
    outputs: Sequence[str] = (),
) -> list[VacuumResult]:
    """VACUUM the job's tables (what no retained checkpoint, nor a running one, needs) and its
    ``outputs``: of those, the files no retained checkpoint's version references, nor a later
    version (a merge's small files, a rolled-back checkpoint's)."""
    check_catalog_not_behind(config, catalog, job)
    versions: dict[str, set[int]] = defaultdict(set)
    for table in [t for c in retained for t in c.tables] + pinned_tables(catalog, job):
        versions[table.path.rstrip("/")].add(table.version)
    running = catalog.list_checkpoints(job, status=CheckpointStatus.IN_PROGRESS, with_tables=False)
    protected_since = min(c.started_at for c in running) - MAX_CLOCK_SKEW if running else None
    latest = catalog.latest_checkpoint(job)
    named = {t.path.rstrip("/"): t.version for t in (latest.tables if latest else ())}
    runs = output_checkpoints(retained)
    if retained and not runs:  # only maintenance checkpoints: the output stands at the last run
        highest = catalog.highest_completed_id(job)
        runs = [] if highest is None else [highest]
    for uri in outputs if runs else ():
        at = output_versions_at(uri, runs)
        if at[runs[-1]] is None:
            continue  # no commit of the latest retained checkpoint in the log: keep everything
        versions[uri.rstrip("/")] = {v for v in at.values() if v is not None}
        named[uri.rstrip("/")] = max(versions[uri.rstrip("/")])
    results = []
    for uri in sorted(set(job_tables(config, job)) | set(versions)):
        after = named.get(uri)
        if after is None:  # no completed checkpoint names it: keep what was committed since
            since = latest.started_at - MAX_CLOCK_SKEW if latest else None
            recent = versions_since(uri, since.timestamp()) if since else [0]
            after = min(recent, default=None)
            after = None if after is None else after - 1
        result = vacuum(
            uri,
            versions.get(uri, ()),
            older_than=older_than,
            keep_after_version=after,
            protected_since=None if protected_since is None else protected_since.timestamp(),
            dry_run=dry_run,
        )
        if result.files:
            progress(
                f"vacuum {job}: {'would delete' if dry_run else 'deleted'} "
                f"{len(result.files)} files ({result.bytes} bytes) of {uri}"
            )
        results.append(result)
    return results


def _check_outputs(config: StatecoreConfig, job: str, outputs: Sequence[str]) -> None:
    """Refuse an output table that is not a Delta table, or that is one of ``job``'s state
    tables (whose log the catalog's versions bound, not the output's commits)."""
    state_tables = {uri.rstrip("/") for uri in job_tables(config, job)}
    for uri in outputs:
        if uri.rstrip("/") in state_tables:
            raise ConfigError(
                f"job {job!r}: output table {uri} is one of the job's state tables; give the "
                f"output and late-data tables the job writes ({_WHERE}); nothing was changed"
            )
        if head_version(uri.rstrip("/")) is None:
            raise ConfigError(
                f"job {job!r}: output table {uri} is not a Delta table (no commit in its "
                f"_delta_log); give the output and late-data tables the job writes ({_WHERE}); "
                "nothing was changed"
            )
        where = f"job {job!r}: output table {uri}"
        check_job_owns(uri.rstrip("/"), warehouse=config.warehouse, job=job, where=where)


def _expirable(completed: list[CheckpointRecord], retain: int) -> list[CheckpointRecord]:
    return completed[: max(0, len(completed) - retain)]


def output_checkpoints(retained: Sequence[CheckpointRecord]) -> list[int]:
    """The ids of the CHECKPOINTs among ``retained``, in id order: the checkpoints that
    committed output. A MAINTENANCE checkpoint (numbered from 10^18, above every run's id)
    commits none, and its id says nothing of where the output stood when it completed."""
    return sorted(c.checkpoint_id for c in retained if c.kind is CheckpointKind.CHECKPOINT)


def _oldest_output_checkpoint(
    retained: Sequence[CheckpointRecord], completed: int | None
) -> int | None:
    """The id below which an output table's files belong to checkpoints no longer retained:
    the oldest retained CHECKPOINT, or (only maintenance checkpoints retained) one above the
    job's latest completed CHECKPOINT ``completed``; ``None`` when the job completed none."""
    ids = output_checkpoints(retained)
    if ids:
        return ids[0]
    return None if completed is None else completed + 1


def apply_retention(
    config: StatecoreConfig,
    catalog: Catalog,
    job: str,
    *,
    retain: int,
    vacuum_after: timedelta | None = DEFAULT_VACUUM_GRACE,
    log_grace: timedelta | None = LOG_GRACE,
    outputs: Sequence[str] = (),
    dry_run: bool = False,
    progress: Progress = silent,
) -> RetentionReport:
    """Keep the last ``retain`` completed checkpoints of ``job``, expire the others, delete the
    FAILED checkpoints older than the oldest retained one, then VACUUM files older than
    ``vacuum_after`` (no VACUUM when ``None``) and cut the Delta logs of the job's tables and
    of ``outputs`` (its output and late-data tables), keeping entries younger than
    ``log_grace`` (no log cleanup when ``None``)."""
    if retain < 1:
        raise ConfigError(f"job {job!r}: retain {retain} checkpoints? Keep at least 1")
    if log_grace is not None and log_grace < timedelta(0):
        raise ConfigError(f"job {job!r}: log_grace {log_grace} is negative")
    catalog.get_job(job)
    _check_outputs(config, job, outputs)
    with maintenance_lock(catalog, job, "retention", wait=config.lease_wait) as lease:
        rolled = _roll_forward(config, catalog, job, lease.fence, dry_run, progress)
        completed = _completed(catalog, job)
        expired = _expirable(completed, retain)
        kept = completed[len(expired) :]
        oldest = kept[0].completed_at if kept else None
        failed = [
            c
            for c in catalog.list_checkpoints(
                job, status=CheckpointStatus.FAILED, with_tables=False
            )
            if oldest is not None and c.started_at < oldest
        ]
        progress(
            f"retention {job}: keeping {[c.checkpoint_id for c in kept]}, expiring "
            f"{[c.checkpoint_id for c in expired]}"
        )
        if not dry_run:
            if expired:
                catalog.expire_checkpoints(job, [c.checkpoint_id for c in expired])
            for checkpoint in failed:
                catalog.delete_checkpoint(job, checkpoint.checkpoint_id)
        completed_id = catalog.highest_completed_id(job)
        before = _oldest_output_checkpoint(kept, completed_id)
        compacted = []
        if before is not None:
            compacted = [
                compact_output(uri, before=before, completed=completed_id, dry_run=dry_run)
                for uri in outputs
            ]
        for done in compacted:
            if done.skipped:
                progress(f"compaction {job}: not {done.uri} now: {done.skipped}")
            elif done.removed:
                progress(
                    f"compaction {job}: {'would merge' if dry_run else 'merged'} {done.removed} "
                    f"files of {done.uri} into {done.added}"
                )
        vacuumed: list[VacuumResult] = []
        if vacuum_after is not None:  # a dry run vacuums as if the expired ones were gone
            vacuumed = _vacuum(
                config,
                catalog,
                job,
                kept,
                older_than=vacuum_after,
                dry_run=dry_run,
                progress=progress,
                outputs=outputs,
            )
        logs: tuple[LogCleanup, ...] = ()
        if log_grace is not None:  # a dry run, too, as if the expired ones were gone
            logs = clean_logs(
                catalog,
                job,
                outputs=outputs,
                older_than=log_grace,
                retained=kept,
                dry_run=dry_run,
            )
            for cleaned in logs:
                progress(
                    f"log cleanup {job}: {'would delete' if dry_run else 'deleted'} "
                    f"{len(cleaned.files)} log entries of {cleaned.uri} (kept from log "
                    f"checkpoint {cleaned.start})"
                )
        return RetentionReport(
            job=job,
            dry_run=dry_run,
            retained=tuple(c.checkpoint_id for c in kept),
            expired=tuple(c.checkpoint_id for c in expired),
            deleted_failed=tuple(c.checkpoint_id for c in failed),
            vacuumed=tuple(vacuumed),
            logs=logs,
            compacted=tuple(compacted),
            rolled_forward=rolled,
        )


def _roll_forward(
    config: StatecoreConfig,
    catalog: Catalog,
    job: str,
    fence: Fence,
    dry_run: bool,
    progress: Progress,
) -> tuple[int, ...]:
    """Commit the pending output of ``job``'s completed checkpoints (a dry run only names it);
    the checkpoints committed. ``progress`` is told each pending commit (checkpoint, table,
    since when, why) before, and what was committed after; a commit that fails is told too
    (naming the checkpoint and what is missing) and raised, with nothing else done."""
    pending = pending_output_status(catalog, job)
    for status in pending:
        progress(f"retention {job}: pending output of {status.describe()}")
    if dry_run:
        ids = tuple(sorted({p.checkpoint_id for p in pending}))
    else:
        try:
            rolled = roll_forward(catalog, job, fence, warehouse=config.warehouse)
        except StateError as exc:
            progress(
                f"retention {job}: rolling the pending output forward FAILED; nothing else was "
                f"done (no checkpoint expired, nothing vacuumed): {exc}"
            )
            raise
        ids = tuple(sorted({p.checkpoint_id for p in rolled}))
    if ids:
        progress(
            f"retention {job}: {'would commit' if dry_run else 'committed'} the pending output "
            f"of checkpoints {list(ids)}"
        )
    _drop_orphaned_staging(config, catalog, job, dry_run, progress)
    return ids


def _drop_orphaned_staging(
    config: StatecoreConfig, catalog: Catalog, job: str, dry_run: bool, progress: Progress
) -> None:
    """Delete the staged output files that no record in the warehouse and no pending commit in
    the catalog names: those of attempts killed before they recorded them (nothing will ever
    commit them). Those of a checkpoint still IN_PROGRESS (a dead writer's, which the next run
    resolves) stay."""
    keep = {p.checkpoint_id for p, _ in catalog.pending_outputs(job)}
    keep |= {
        c.checkpoint_id
        for c in catalog.list_checkpoints(
            job, status=CheckpointStatus.IN_PROGRESS, with_tables=False
        )
    }
    orphaned = [c for c in unrecorded_staging(config.warehouse, job) if c not in keep]
    if not orphaned:
        return
    progress(
        f"retention {job}: {'would delete' if dry_run else 'deleted'} the staged output files "
        f"no pending commit names, of checkpoints {orphaned}"
    )
    if not dry_run:
        for checkpoint_id in orphaned:
            delete_staged_checkpoint(config.warehouse, job, checkpoint_id)
