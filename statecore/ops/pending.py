"""The pending output of a job's completed checkpoints, as people are told about it.

A checkpoint that completed but whose output commit is not done yet (the commit failed, or its
writer stopped after the completion) leaves its output *pending* in the catalog
(:meth:`~statecore.catalog.Catalog.pending_outputs`). :func:`pending_output_status` says, per
output table, since when it is pending (the checkpoint's completion) and why (the last failed
attempt's error, or :data:`NOT_ATTEMPTED`): the statecore page in Airflow's UI shows it
(:func:`statecore.ops.overview.pending_outputs_overview`) and the maintenance retention logs it
before it rolls the output forward (:func:`statecore.ops.retention.apply_retention`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from statecore.catalog import Catalog, CheckpointStatus
from statecore.checkpoint.outputs import roll_forward
from statecore.progress import Progress
from statecore.snapshot import Fence

__all__ = [
    "NOT_ATTEMPTED",
    "ROLLED_FORWARD_BY",
    "PendingOutputStatus",
    "pending_output_status",
    "roll_forward_first",
]

NOT_ATTEMPTED = (
    "not attempted yet: no failed commit recorded (its writer stopped after the completion, "
    "before the commit)"
)
"""Why a checkpoint's output is pending when no attempt to commit it failed."""

ROLLED_FORWARD_BY = (
    "the job's next run, the state_maintenance DAG's retention task, a savepoint, rescale or "
    "ttl-cleanup of the job, or `statecore catalog recover {job}`"
)
"""What commits pending output (format with ``job``)."""


@dataclass(frozen=True, kw_only=True)
class PendingOutputStatus:
    """One pending output commit of a completed checkpoint: its ``kind`` (``output``,
    ``late-data``) of the table at ``uri``, its ``files`` and ``rows``, pending ``since`` the
    checkpoint's completion (else since it was recorded) and ``why``."""

    job: str
    checkpoint_id: int
    kind: str
    uri: str
    files: int
    rows: int
    since: datetime | None
    why: str
    attempted: bool
    """Whether an attempt to commit it failed (``why`` is then its error)."""

    def describe(self) -> str:
        """One line for a log: which checkpoint, which table, since when and why."""
        since = "an unknown time" if self.since is None else f"{self.since:%Y-%m-%d %H:%M:%S} UTC"
        return (
            f"checkpoint {self.checkpoint_id}: its {self.kind} ({self.files} files, {self.rows} "
            f"rows) to {self.uri} is pending since {since}: {self.why}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "checkpoint": self.checkpoint_id,
            "output": self.kind,
            "table": self.uri,
            "files": self.files,
            "rows": self.rows,
            "pending_since": None if self.since is None else self.since.isoformat(),
            "why": self.why,
            "attempted": self.attempted,
        }


_DONE = (CheckpointStatus.COMPLETED, CheckpointStatus.EXPIRED)


def pending_output_status(catalog: Catalog, job: str) -> list[PendingOutputStatus]:
    """The pending output commits of ``job``'s completed checkpoints, by checkpoint id (those
    of checkpoints not completed are not pending output: a run discards them)."""
    pending = [(p, s) for p, s in catalog.pending_outputs(job) if s in _DONE]
    completed: dict[int, datetime | None] = {}
    for checkpoint_id in sorted({p.checkpoint_id for p, _ in pending}):
        completed[checkpoint_id] = catalog.get_checkpoint(job, checkpoint_id).completed_at
    return [
        PendingOutputStatus(
            job=job,
            checkpoint_id=p.checkpoint_id,
            kind=p.kind,
            uri=p.uri,
            files=len(p.files),
            rows=sum(int(f.get("rows", 0)) for f in p.files),
            since=completed.get(p.checkpoint_id) or p.recorded_at,
            why=p.last_error or NOT_ATTEMPTED,
            attempted=p.last_error is not None,
        )
        for p, _ in pending
    ]


def roll_forward_first(
    operation: str, catalog: Catalog, job: str, fence: Fence, *, warehouse: str, progress: Progress
) -> tuple[int, ...]:
    """Commit the pending output of ``job``'s completed checkpoints before the maintenance
    ``operation`` (a savepoint, rescale or ttl-cleanup holding the job's lease, fenced by
    ``fence``) goes on: each pending commit is told to ``progress`` (checkpoint, table, since
    when, why), then what was committed. A commit that cannot be made raises (naming the
    checkpoint and what is missing) and the operation does not go on. The checkpoints
    committed."""
    pending = pending_output_status(catalog, job)
    if not pending:
        return ()
    for status in pending:
        progress(f"{operation} {job}: pending output of {status.describe()}")
    rolled = roll_forward(catalog, job, fence, warehouse=warehouse)
    ids = tuple(sorted({p.checkpoint_id for p in rolled}))
    progress(f"{operation} {job}: committed the pending output of checkpoints {list(ids)}")
    return ids
