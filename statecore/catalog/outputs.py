"""Output tables in the catalog: each bound to its one writer, and checkpoints' pending commits.

Flink's two-phase-commit sinks: a checkpoint's output (and late-data) files are *pre-committed*
as its pending output commits, in the catalog, before the checkpoint completes; they are
committed to their tables only after it completed, and whoever holds the job next (its next run,
a replay, ``statecore catalog recover``) commits what is still pending. The files of a
checkpoint that never completes are never committed: its pending records are discarded (the
caller deletes the files).

An output table has one writer: :meth:`OutputStore.bind` binds a table to the job, operator and
kind (output or late data) that first names it, and refuses any other with
:class:`~statecore.errors.OutputOwnedError`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from statecore.catalog.leases import load_in_progress
from statecore.catalog.lookup import load_checkpoint, load_job
from statecore.catalog.models import CheckpointRow, OutputOwnerRow, PendingOutputRow
from statecore.catalog.records import CheckpointStatus, OutputOwner, PendingOutput
from statecore.catalog.store import Store, now
from statecore.errors import CheckpointCommitError, OutputOwnedError

__all__ = ["OutputStore"]

_DONE = (CheckpointStatus.COMPLETED.name, CheckpointStatus.EXPIRED.name)


class OutputStore(Store):
    """Output tables' writers, and checkpoints' pending output commits."""

    def bind(
        self, tables: Sequence[tuple[str, str]], *, job: str, operator: str
    ) -> list[OutputOwner]:
        """Bind each table of ``tables`` (``(uri, kind)``) that is unbound to ``job`` and
        ``operator``, all or none: :class:`OutputOwnedError` when one is bound to another
        writer (then none is bound)."""
        for attempt in range(2):
            try:
                with self._write.begin() as session:
                    owners = []
                    for uri, kind in tables:
                        row = session.get(OutputOwnerRow, uri)
                        if row is None:
                            row = OutputOwnerRow(
                                uri=uri, job=job, operator=operator, kind=kind, bound_at=now()
                            )
                            session.add(row)
                        owner = row.to_record()
                        if (owner.job, owner.operator, owner.kind) != (job, operator, kind):
                            asking = OutputOwner(uri=uri, job=job, operator=operator, kind=kind)
                            raise OutputOwnedError(
                                f"the {kind} table {uri} is written by {owner.writer}; "
                                f"{asking.writer} cannot write it too (one table has one "
                                "writer: name another table)"
                            )
                        owners.append(owner)
                    session.flush()
                return owners
            except sa.exc.IntegrityError:  # bound concurrently by another process
                if attempt:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def owner(self, uri: str) -> OutputOwner | None:
        """The writer the table at ``uri`` is bound to, or ``None``."""
        with self._read.begin() as session:
            row = session.get(OutputOwnerRow, uri)
            return None if row is None else row.to_record()

    def record(
        self,
        job: str,
        checkpoint_id: int,
        outputs: Sequence[PendingOutput],
        *,
        epoch: int | None = None,
    ) -> None:
        """Record ``outputs`` as the pending output commits of the IN_PROGRESS checkpoint (in
        place of any an earlier attempt recorded: their files must be gone), fenced by
        ``epoch`` as its completion is."""
        with self._write.begin() as session:
            job_row, _ = load_in_progress(
                session,
                job,
                checkpoint_id,
                epoch=epoch,
                act="record its output",
                refused="its output cannot be recorded",
            )
            session.execute(
                sa.delete(PendingOutputRow).where(
                    PendingOutputRow.job_id == job_row.id,
                    PendingOutputRow.checkpoint_id == checkpoint_id,
                )
            )
            recorded_at = now()
            for output in outputs:
                session.add(
                    PendingOutputRow(
                        job_id=job_row.id,
                        checkpoint_id=checkpoint_id,
                        uri=output.uri,
                        kind=output.kind,
                        app_id=output.app_id,
                        table_schema=output.table_schema,
                        files=[dict(f) for f in output.files],
                        epoch=epoch,
                        recorded_at=recorded_at,
                    )
                )

    def pending(
        self, job: str, checkpoint_id: int | None = None
    ) -> list[tuple[PendingOutput, CheckpointStatus]]:
        """The output commits of ``job`` still pending (of one checkpoint if given), each with
        its checkpoint's status, by checkpoint id."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            query = (
                sa.select(PendingOutputRow, CheckpointRow.status)
                .join(
                    CheckpointRow,
                    sa.and_(
                        CheckpointRow.job_id == PendingOutputRow.job_id,
                        CheckpointRow.checkpoint_id == PendingOutputRow.checkpoint_id,
                    ),
                )
                .where(
                    PendingOutputRow.job_id == job_row.id,
                    PendingOutputRow.committed_at.is_(None),
                )
                .order_by(PendingOutputRow.checkpoint_id, PendingOutputRow.id)
            )
            if checkpoint_id is not None:
                query = query.where(PendingOutputRow.checkpoint_id == checkpoint_id)
            return [
                (row.to_record(job), CheckpointStatus[status])
                for row, status in session.execute(query).tuples()
            ]

    def mark_committed(self, job: str, checkpoint_id: int, uri: str) -> None:
        """Mark the pending commit of ``checkpoint_id`` to ``uri`` done."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            session.execute(
                sa.update(PendingOutputRow)
                .where(
                    PendingOutputRow.job_id == job_row.id,
                    PendingOutputRow.checkpoint_id == checkpoint_id,
                    PendingOutputRow.uri == uri,
                    PendingOutputRow.committed_at.is_(None),
                )
                .values(committed_at=now())
            )

    def note_error(self, job: str, checkpoint_id: int, uri: str, error: str) -> None:
        """Record why the last attempt to commit the pending commit of ``checkpoint_id`` to
        ``uri`` failed."""
        with self._write.begin() as session:
            job_row = load_job(session, job)
            session.execute(
                sa.update(PendingOutputRow)
                .where(
                    PendingOutputRow.job_id == job_row.id,
                    PendingOutputRow.checkpoint_id == checkpoint_id,
                    PendingOutputRow.uri == uri,
                    PendingOutputRow.committed_at.is_(None),
                )
                .values(last_error=error[:4000])
            )

    def discard(self, job: str, checkpoint_id: int) -> list[PendingOutput]:
        """Forget the pending commits of a checkpoint that did not complete (the caller deletes
        their files); the ones forgotten. Those of a completed checkpoint are never discarded:
        :class:`CheckpointCommitError`."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            status = load_checkpoint(session, job_row, checkpoint_id).status
            rows = list(
                session.scalars(
                    sa.select(PendingOutputRow).where(
                        PendingOutputRow.job_id == job_row.id,
                        PendingOutputRow.checkpoint_id == checkpoint_id,
                        PendingOutputRow.committed_at.is_(None),
                    )
                )
            )
            if rows and status in _DONE:
                raise CheckpointCommitError(
                    f"checkpoint {checkpoint_id} of job {job!r} is {status}: its pending output "
                    "commits are rolled forward, never discarded"
                )
            for row in rows:
                session.delete(row)
            return [row.to_record(job) for row in rows]
