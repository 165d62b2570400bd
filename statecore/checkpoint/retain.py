"""Bounded checkpoint rows for a job that checkpoints often (a stream: one checkpoint per
micro-batch), applied by the run itself right after it completed a checkpoint.

A run given ``retain_checkpoints=N`` keeps the job's last ``N`` completed checkpoints, marks the
older ones EXPIRED (as ``statecore retention`` does: they name no table version any more, and
their ids still replay as no-ops), and deletes the rows of EXPIRED checkpoints beyond the newest
``N`` of them (never the row of the highest completed CHECKPOINT, whatever maintenance
checkpoints completed after it: it keeps a replay of that id a no-op), and of FAILED
checkpoints older than the oldest retained one. So the catalog holds
at most about ``2 N`` rows per job (plus one in progress), whatever the number of micro-batches.

A deleted row's id is no longer known to the catalog: replaying it (an old Spark offset log
entry) is refused loudly with :class:`~statecore.errors.CheckpointOrderError`, since it is below the
latest completed id, instead of being a silent no-op; Structured Streaming only ever replays its
last micro-batch, which is retained.

Then the Delta logs are cut (:func:`clean_logs`, :func:`statecore.snapshot.log.cleanup_log`): in
every table a retained checkpoint names (keyed, operator, timers and changes tables) and in the
job's output and late-data tables, the log entries below the newest log checkpoint at or below
the oldest version a retained checkpoint needs are deleted, once older than
:data:`~statecore.snapshot.log.LOG_GRACE`. So each ``_delta_log`` holds the commits of the
retained checkpoints, of the last grace period and of one log checkpoint interval, whatever the
number of micro-batches. A state table's needed version is the one the catalog names; an output
table's is the version its commit of the oldest retained CHECKPOINT made
(:func:`~statecore.snapshot.output.output_version_at`; maintenance checkpoints commit no
output, and their ids, from 10^18, say nothing of where the output stood). A pinned savepoint
(:func:`~statecore.checkpoint.points.pinned_tables`) bounds the logs of its tables as a retained
checkpoint does, and a table it pins is cut only to what its pinned version needs, even when no
retained checkpoint names that table any more. Exported savepoints have tables of their own,
which this never touches. A table no retained checkpoint names (one a
checkpoint in progress created, or of a dropped state) is left alone.

No data file is deleted: VACUUM stays an explicit operation (``statecore retention`` or the
``state_maintenance`` DAG), since only it knows a grace period for files other readers may use.
The caller holds the job's lease (a run) or its maintenance lock, so no commit or log checkpoint
of the job's own runs races the cleanup.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from statecore.catalog import Catalog, CheckpointKind, CheckpointRecord, CheckpointStatus
from statecore.checkpoint.points import pinned_tables
from statecore.errors import ConfigError
from statecore.snapshot.log import LOG_GRACE, LogCleanup, cleanup_log
from statecore.snapshot.output import output_version_at

__all__ = ["RetainResult", "clean_logs", "retain_checkpoints"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RetainResult:
    """The checkpoint ids a run's retention expired and deleted."""

    expired: tuple[int, ...] = ()
    deleted: tuple[int, ...] = ()
    logs: tuple[LogCleanup, ...] = ()
    """The log entries deleted, per table that lost some."""

    @property
    def log_files_deleted(self) -> int:
        return sum(len(c.files) for c in self.logs)


def _by_completion(checkpoints: list[CheckpointRecord]) -> list[CheckpointRecord]:
    return sorted(
        checkpoints, key=lambda c: (c.completed_at is None, c.completed_at, c.checkpoint_id)
    )


def retain_checkpoints(
    catalog: Catalog,
    job: str,
    *,
    retain: int,
    outputs: Sequence[str] = (),
    log_grace: timedelta | None = LOG_GRACE,
) -> RetainResult:
    """Keep ``job``'s last ``retain`` completed checkpoints and at most ``retain`` EXPIRED rows;
    expire and delete the rest, then cut the Delta logs of the job's tables and of the
    ``outputs`` tables (the job's output and late-data tables) to what the retained checkpoints
    need, keeping entries younger than ``log_grace`` (``None``: no log cleanup); see the module
    docstring."""
    if retain < 1:
        raise ConfigError(f"job {job!r}: retain {retain} checkpoints? Keep at least 1")
    if log_grace is not None and log_grace < timedelta(0):
        raise ConfigError(f"job {job!r}: log_grace {log_grace} is negative")
    every = catalog.list_checkpoints(job, with_tables=False)
    completed = _by_completion([c for c in every if c.status == CheckpointStatus.COMPLETED])
    expire = completed[: max(0, len(completed) - retain)]
    if expire:
        catalog.expire_checkpoints(job, [c.checkpoint_id for c in expire])
    kept = completed[len(expire) :]
    oldest = kept[0].completed_at if kept else None
    expired = _by_completion(
        [c for c in every if c.status == CheckpointStatus.EXPIRED] + list(expire)
    )
    # the highest completed CHECKPOINT's row stays whatever came after it: while it is known,
    # a replay of its id (or an older one) is a no-op or refused, never run as new
    guard = catalog.highest_completed_id(job)
    delete = [
        c.checkpoint_id
        for c in expired[: max(0, len(expired) - retain)]
        if c.checkpoint_id != guard
    ]
    delete += [
        c.checkpoint_id
        for c in every
        if c.status == CheckpointStatus.FAILED and oldest is not None and c.started_at < oldest
    ]
    for checkpoint_id in delete:
        catalog.delete_checkpoint(job, checkpoint_id)
    logs = (
        () if log_grace is None else clean_logs(catalog, job, outputs=outputs, older_than=log_grace)
    )
    return RetainResult(
        expired=tuple(c.checkpoint_id for c in expire),
        deleted=tuple(sorted(delete)),
        logs=logs,
    )


def clean_logs(
    catalog: Catalog,
    job: str,
    *,
    outputs: Sequence[str] = (),
    older_than: timedelta = LOG_GRACE,
    retained: Sequence[CheckpointRecord] | None = None,
    dry_run: bool = False,
) -> tuple[LogCleanup, ...]:
    """Cut the Delta log of every table ``job``'s completed checkpoints (or ``retained``, with
    their tables) name, and of each of ``outputs``, to what those checkpoints need (see the
    module docstring); the tables that lost entries. A table whose log cannot be read or cut is
    logged and skipped: the next retention tries again."""
    if retained is None:
        retained = catalog.list_checkpoints(
            job, status=CheckpointStatus.COMPLETED, with_sizes=False
        )
    if not retained:
        return ()
    needed: dict[str, int] = {}
    pinned = pinned_tables(catalog, job)
    for table in [t for c in retained for t in c.tables] + pinned:
        uri = table.path.rstrip("/")
        needed[uri] = min(needed.get(uri, table.version), table.version)
    # an output holds what CHECKPOINTs committed: its bound is the oldest retained one's (a
    # MAINTENANCE id, from 10^18, is above every run's and would name the head: perhaps a
    # commit not completed yet, whose roll-back needs the entries before it)
    runs = [c.checkpoint_id for c in retained if c.kind is CheckpointKind.CHECKPOINT]
    oldest = min(runs) if runs else catalog.highest_completed_id(job)
    bounds: dict[str, int | Callable[[], int | None]] = dict(needed)
    if oldest is not None:
        for uri in outputs:
            bounds[uri.rstrip("/")] = functools.partial(output_version_at, uri, oldest)
    cleaned = []
    for uri, bound in sorted(bounds.items()):
        try:
            result = cleanup_log(uri, bound, older_than=older_than, dry_run=dry_run)
        except (OSError, ValueError) as exc:
            log.warning("job %s: the Delta log of %s was not cleaned up: %s", job, uri, exc)
            continue
        if result.files:
            cleaned.append(result)
    return tuple(cleaned)
