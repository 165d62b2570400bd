"""The job's lease: held by a run or a maintenance operation, with a fencing epoch."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from statecore.catalog.lookup import load_checkpoint, load_job
from statecore.catalog.models import CheckpointRow, JobRow, MaintenanceLockRow
from statecore.catalog.records import MaintenanceLock
from statecore.catalog.store import Store, database_now
from statecore.config import DEFAULT_LEASE_TIMEOUT
from statecore.errors import CheckpointCommitError, ConcurrentRunError, MaintenanceLockedError
from statecore.processes import owner_gone

__all__ = ["RUN_OPERATION", "LeaseStore", "check_epoch", "load_in_progress"]

RUN_OPERATION = "run"
"""The operation of a lease held by a run of the job (``run`` + the checkpoint id)."""


class LeaseStore(Store):
    """One lease per job (its row keyed by the job), taken over only when its holder is gone."""

    def acquire(
        self,
        job: str,
        *,
        operation: str,
        owner: str,
        timeout: timedelta = DEFAULT_LEASE_TIMEOUT,
        stale_after: timedelta | None = None,
    ) -> MaintenanceLock:
        """Hold ``job`` for ``operation`` until ``timeout`` from now (renew it to keep it), with
        a new fencing epoch, one more than any before.

        A lease that is held is taken over only once it expired, once it is older than
        ``stale_after``, or when its holder is provably a process that is gone (of this host
        and pid space: :func:`statecore.processes.owner_gone`); otherwise
        :class:`ConcurrentRunError` (:class:`MaintenanceLockedError` when a maintenance
        operation holds it) names the holder. Times are the catalog database's
        (:func:`~statecore.catalog.store.database_now`), never this client's: a client whose
        clock runs ahead does not take a live lease, one whose clock lags does not wait for an
        expired one.
        """
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            row = session.get(MaintenanceLockRow, job_row.id)
            acquired_at = database_now(session)
            if row is not None:
                held = row.to_record(job)
                if not _may_take_over(held, acquired_at, stale_after):
                    raise _held_error(held)
                session.delete(row)
                session.flush()
            job_row.lease_epoch += 1
            row = MaintenanceLockRow(
                job_id=job_row.id,
                operation=operation,
                owner=owner,
                acquired_at=acquired_at,
                epoch=job_row.lease_epoch,
                expires_at=acquired_at + timeout,
            )
            session.add(row)
            return row.to_record(job)

    def renew(self, job: str, *, epoch: int, timeout: timedelta) -> MaintenanceLock | None:
        """Extend the lease of ``epoch`` to ``timeout`` from now (the catalog's clock);
        ``None`` if it was lost."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            row = session.get(MaintenanceLockRow, job_row.id)
            if row is None or row.epoch != epoch:
                return None
            row.expires_at = database_now(session) + timeout
            return row.to_record(job)

    def check(self, job: str, *, epoch: int) -> None:
        """:class:`ConcurrentRunError` unless the lease of ``epoch`` still holds ``job``."""
        with self._read.begin() as session:
            check_epoch(session, load_job(session, job), epoch)

    def release(self, job: str, *, owner: str | None = None) -> MaintenanceLock | None:
        """Release the job's lease (only if ``owner`` holds it, when given)."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            row = session.get(MaintenanceLockRow, job_row.id)
            if row is None or (owner is not None and row.owner != owner):
                return None
            session.delete(row)
            return row.to_record(job)

    def raise_epoch(self, job: str, *, at_least: int) -> int:
        """Make the job's next lease take an epoch above ``at_least`` (the epochs its tables
        carry, for a catalog rebuilt from them); its last epoch, raised or not."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            job_row.lease_epoch = max(job_row.lease_epoch, at_least)
            return job_row.lease_epoch

    def holder(self, job: str) -> MaintenanceLock | None:
        """The lease holding ``job`` (a run or a maintenance operation), or ``None``."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            row = session.get(MaintenanceLockRow, job_row.id)
            return None if row is None else row.to_record(job)


def check_epoch(session: Session, job_row: JobRow, epoch: int) -> None:
    """:class:`ConcurrentRunError` unless the lease of ``epoch`` holds the job, in ``session``."""
    row = session.get(MaintenanceLockRow, job_row.id)
    if row is not None and row.epoch == epoch:
        return
    held = "released" if row is None else f"now held by {_describe(row.to_record(job_row.name))}"
    raise ConcurrentRunError(
        f"job {job_row.name!r}: the lease of epoch {epoch} was lost ({held}); this writer's "
        "commits are refused and nothing it wrote becomes visible"
    )


def load_in_progress(
    session: Session,
    job: str,
    checkpoint_id: int,
    *,
    epoch: int | None,
    act: str,
    refused: str,
) -> tuple[JobRow, CheckpointRow]:
    """The job's row, locked for the transaction, and its IN_PROGRESS checkpoint's row, fenced
    by ``epoch`` (unless ``None``): :class:`ConcurrentRunError` if its lease or the checkpoint
    was taken by another writer (who then cannot ``act``), :class:`CheckpointCommitError`
    (saying ``refused``) if the checkpoint is no longer IN_PROGRESS."""
    where = f"checkpoint {checkpoint_id} of job {job!r}"
    job_row = load_job(session, job, lock=True)
    if epoch is not None:
        check_epoch(session, job_row, epoch)
    row = load_checkpoint(session, job_row, checkpoint_id)
    if epoch is not None and row.epoch != epoch:
        raise ConcurrentRunError(
            f"{where} was begun again by the writer of epoch {row.epoch}; the writer of epoch "
            f"{epoch} cannot {act}"
        )
    if row.status != "IN_PROGRESS":
        raise CheckpointCommitError(f"{where} is {row.status}, not IN_PROGRESS: {refused}")
    return job_row, row


def _is_run(lease: MaintenanceLock) -> bool:
    return lease.operation.split(" ", 1)[0] == RUN_OPERATION


def _may_take_over(held: MaintenanceLock, at: datetime, stale_after: timedelta | None) -> bool:
    if held.expires_at is not None and held.expires_at <= at:
        return True
    if stale_after is not None and at - held.acquired_at >= stale_after:
        return True
    return owner_gone(held.owner)


def _describe(lease: MaintenanceLock) -> str:
    what = "the run" if _is_run(lease) else "the maintenance operation"
    expires = "" if lease.expires_at is None else f", lease expires {lease.expires_at:%H:%M:%S} UTC"
    return (
        f"{what} {lease.operation!r} ({lease.owner}) since "
        f"{lease.acquired_at:%Y-%m-%d %H:%M:%S} UTC (epoch {lease.epoch}{expires})"
    )


def _held_error(held: MaintenanceLock) -> ConcurrentRunError:
    message = (
        f"job {held.job!r} is held by {_describe(held)}; wait for it to finish, or if it "
        f"died, release it with `statecore unlock {held.job}`"
    )
    return ConcurrentRunError(message) if _is_run(held) else MaintenanceLockedError(message)
