"""Bounded checkpoint rows for a job that checkpoints often (a stream: one checkpoint per
micro-batch), applied by the run itself right after it completed a checkpoint.

A run given ``retain_checkpoints=N`` keeps the job's last ``N`` completed checkpoints, marks the
older ones EXPIRED (as ``statecore retention`` does: they name no table version any more, and
their ids still replay as no-ops), and deletes the rows of EXPIRED checkpoints beyond the newest
``N`` of them, and of FAILED checkpoints older than the oldest retained one. So the catalog holds
at most about ``2 N`` rows per job (plus one in progress), whatever the number of micro-batches.

A deleted row's id is no longer known to the catalog: replaying it (an old Spark offset log
entry) is refused loudly with :class:`~statecore.errors.CheckpointOrderError`, since it is below the
latest completed id, instead of being a silent no-op; Structured Streaming only ever replays its
last micro-batch, which is retained.

No file is deleted: VACUUM stays an explicit operation (``statecore retention`` or the
``state_maintenance`` DAG), since only it knows a grace period for files other readers may use.
The caller holds the job's lease (a run) or its maintenance lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from statecore.catalog import Catalog, CheckpointRecord, CheckpointStatus
from statecore.errors import ConfigError

__all__ = ["RetainResult", "retain_checkpoints"]


@dataclass(frozen=True, kw_only=True)
class RetainResult:
    """The checkpoint ids a run's retention expired and deleted."""

    expired: tuple[int, ...] = ()
    deleted: tuple[int, ...] = ()


def _by_completion(checkpoints: list[CheckpointRecord]) -> list[CheckpointRecord]:
    return sorted(
        checkpoints, key=lambda c: (c.completed_at is None, c.completed_at, c.checkpoint_id)
    )


def retain_checkpoints(catalog: Catalog, job: str, *, retain: int) -> RetainResult:
    """Keep ``job``'s last ``retain`` completed checkpoints and at most ``retain`` EXPIRED rows;
    expire and delete the rest (see the module docstring)."""
    if retain < 1:
        raise ConfigError(f"job {job!r}: retain {retain} checkpoints? Keep at least 1")
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
    delete = [c.checkpoint_id for c in expired[: max(0, len(expired) - retain)]]
    delete += [
        c.checkpoint_id
        for c in every
        if c.status == CheckpointStatus.FAILED and oldest is not None and c.started_at < oldest
    ]
    for checkpoint_id in delete:
        catalog.delete_checkpoint(job, checkpoint_id)
    return RetainResult(
        expired=tuple(c.checkpoint_id for c in expire), deleted=tuple(sorted(delete))
    )
