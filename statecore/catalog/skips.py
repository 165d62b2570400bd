"""Skipped checkpoints: the ids a job's runs go past on purpose, each with its reason.

Stateful intervals run in order, or not at all: a run whose checkpoint would leave an earlier
interval with input behind, neither completed nor skipped, is refused
(:func:`statecore.ops.runs.plan_batch_run`). A user who decides an interval is not to be
processed (its input is broken, or was never meant for the job) records that decision here, with
its reason; the next run then goes past it, and the skip stays in the catalog for audit.

>>> from statecore.catalog import Catalog
>>> with Catalog.connect("sqlite://") as catalog:
...     _ = catalog.ensure_job("clicks", parallelism=1, max_parallelism=128)
...     _ = catalog.skip_checkpoint("clicks", 20260105, reason="input corrupt")
...     [s.checkpoint_id for s in catalog.skipped_checkpoints("clicks")]
[20260105]
"""

from __future__ import annotations

import sqlalchemy as sa

from statecore.catalog.checkpoints import highest_completed_checkpoint_id
from statecore.catalog.lookup import find_checkpoint, load_job
from statecore.catalog.models import SkippedCheckpointRow
from statecore.catalog.records import CheckpointStatus, SkippedCheckpoint
from statecore.catalog.store import Store, now
from statecore.errors import CheckpointOrderError, ConfigError

__all__ = ["SkipStore"]

_DONE = (CheckpointStatus.COMPLETED.name, CheckpointStatus.EXPIRED.name)


class SkipStore(Store):
    """Each job's skipped checkpoint ids."""

    def skip(self, job: str, checkpoint_id: int, *, reason: str) -> SkippedCheckpoint:
        """Record that ``job``'s runs go past ``checkpoint_id`` on purpose, for ``reason``
        (recording it again replaces the reason). Refused for a completed checkpoint and for an
        id below the job's latest completed checkpoint (its runs are past it already)."""
        reason = reason.strip()
        if not reason:
            raise ConfigError(
                f"skipping checkpoint {checkpoint_id} of job {job!r} needs a reason (it is "
                "kept in the catalog for whoever asks later why the job's state lacks it)"
            )
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            row = find_checkpoint(session, job_row, checkpoint_id)
            if row is not None and row.status in _DONE:
                raise ConfigError(
                    f"checkpoint {checkpoint_id} of job {job!r} is {row.status}: its interval "
                    "is in the state and cannot be skipped"
                )
            latest = highest_completed_checkpoint_id(session, job_row.id)
            if latest is not None and checkpoint_id < latest:
                raise CheckpointOrderError(
                    f"checkpoint {checkpoint_id} of job {job!r} is below its latest completed "
                    f"checkpoint {latest}: the job's runs are past it already"
                )
            skipped = session.scalar(
                sa.select(SkippedCheckpointRow).where(
                    SkippedCheckpointRow.job_id == job_row.id,
                    SkippedCheckpointRow.checkpoint_id == checkpoint_id,
                )
            )
            if skipped is None:
                skipped = SkippedCheckpointRow(job_id=job_row.id, checkpoint_id=checkpoint_id)
                session.add(skipped)
            skipped.reason = reason
            skipped.skipped_at = now()
            return skipped.to_record(job)

    def list(
        self, job: str, *, above: int | None = None, below: int | None = None
    ) -> list[SkippedCheckpoint]:
        """``job``'s skipped checkpoints, by id, those strictly between ``above`` and
        ``below`` when given."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            query = sa.select(SkippedCheckpointRow).where(SkippedCheckpointRow.job_id == job_row.id)
            if above is not None:
                query = query.where(SkippedCheckpointRow.checkpoint_id > above)
            if below is not None:
                query = query.where(SkippedCheckpointRow.checkpoint_id < below)
            rows = session.scalars(query.order_by(SkippedCheckpointRow.checkpoint_id))
            return [row.to_record(job) for row in rows]
