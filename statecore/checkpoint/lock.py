"""The job's lease, and what every maintenance operation shares: maintenance checkpoints.

One writer per job at a time, as Flink has one JobManager per job: a run of the job and every
maintenance operation (savepoint, rescale, TTL cleanup, retention, restore, repair) hold the
job's lease in the catalog for their whole duration (:func:`hold_lease`), so no two of them
interleave. A daemon thread renews it at a third of the lease timeout; a holder that stops
renewing (a dead process) is taken over once its lease expired, with a larger fencing epoch.
Every Delta commit and catalog completion of a run, and of a maintenance checkpoint
(:func:`commit_maintenance_checkpoint`), checks that its epoch is still the current one, so a
writer that was taken over fails with :class:`~statecore.errors.ConcurrentRunError` and nothing
it wrote becomes visible.

An operation that changes the state commits it as a new MAINTENANCE checkpoint: numbered from
:data:`MAINTENANCE_ID_BASE` so it never takes an id the job will use (dates, micro-batch ids),
based on the latest completed checkpoint, and completed only if that is still the latest one, so
a job run that completed meanwhile is never overwritten.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

from statecore.catalog import (
    Catalog,
    CheckpointKind,
    CheckpointRecord,
    MaintenanceLock,
    TableVersion,
)
from statecore.config import StatecoreConfig, check_name
from statecore.errors import (
    CheckpointCommitError,
    ConcurrentRunError,
    ConfigError,
    MaintenanceLockedError,
)
from statecore.processes import process_owner
from statecore.snapshot import Fence

__all__ = [
    "MAINTENANCE_ID_BASE",
    "WAIT_INTERVAL",
    "JobLease",
    "check_not_locked",
    "hold_lease",
    "commit_maintenance_checkpoint",
    "fail_quietly",
    "maintenance_lock",
    "next_maintenance_checkpoint_id",
]

log = logging.getLogger(__name__)

MAINTENANCE_ID_BASE = 10**18
"""Maintenance checkpoints are numbered from here up (the catalog's ids are 64-bit)."""


class JobLease:
    """A lease this process holds on a job: its ``epoch`` fences every commit of the holder.

    A daemon thread renews it every third of ``timeout``; when a renewal finds the lease taken
    over (or released by ``statecore unlock``), :meth:`check` fails from then on.
    """

    def __init__(self, catalog: Catalog, lease: MaintenanceLock, timeout: timedelta) -> None:
        self.catalog = catalog
        self.lease = lease
        self.timeout = timeout
        self._lost: str | None = None
        self._stop = threading.Event()
        self._renewer = threading.Thread(
            target=self._renew, name=f"statecore-lease-{lease.job}", daemon=True
        )
        self._renewer.start()

    @property
    def job(self) -> str:
        return self.lease.job

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    @property
    def holder(self) -> str:
        return self.lease.owner

    @property
    def fence(self) -> Fence:
        """This lease's epoch for the Delta commits of its holder (checked against the
        catalog before each)."""
        return Fence(self.job, self.epoch, self.check)

    def check(self) -> None:
        """:class:`ConcurrentRunError` unless this lease still holds the job (asks the
        catalog: call it before a commit)."""
        if self._lost is not None:
            raise ConcurrentRunError(self._lost)
        self.catalog.check_lease(self.job, epoch=self.epoch)

    def _renew(self) -> None:
        interval = self.timeout.total_seconds() / 3
        while not self._stop.wait(interval):
            try:
                renewed = self.catalog.renew_lease(self.job, epoch=self.epoch, timeout=self.timeout)
            except Exception as exc:  # a transient catalog error: try again at the next tick
                log.warning("job %s: renewing the lease failed: %s", self.job, exc)
                continue
            if renewed is None:
                self._lost = (
                    f"job {self.job!r}: the lease of epoch {self.epoch} ({self.holder}) was "
                    "taken over or released; this writer's commits are refused"
                )
                log.error("%s", self._lost)
                return

    def release(self) -> None:
        self._stop.set()
        self._renewer.join()
        self.catalog.release_maintenance_lock(self.job, owner=self.holder)


@contextmanager
def hold_lease(
    catalog: Catalog,
    job: str,
    operation: str,
    *,
    timeout: timedelta | None = None,
    stale_after: timedelta | None = None,
    wait: timedelta | None = None,
) -> Iterator[JobLease]:
    """Hold ``job``'s lease for ``operation``, renewed until the block ends.

    :class:`ConcurrentRunError` (:class:`MaintenanceLockedError` for a maintenance holder)
    names the holder when another writer holds it and its lease has not expired, at once or,
    with ``wait``, once it has held it that long after the first try (tried again every
    :data:`WAIT_INTERVAL`, nothing written meanwhile). ``timeout`` and ``wait`` default to the
    configured ``lease_timeout`` and ``lease_wait`` (``STATECORE_LEASE_TIMEOUT``,
    ``STATECORE_LEASE_WAIT``).
    """
    if timeout is None or wait is None:
        config = StatecoreConfig.resolve()
        timeout = timeout or config.lease_timeout
        wait = config.lease_wait if wait is None else wait
    record = _acquire(catalog, job, operation, timeout, stale_after, wait)
    lease = JobLease(catalog, record, timeout)
    try:
        yield lease
    finally:
        lease.release()


WAIT_INTERVAL = timedelta(seconds=2)
"""How often a writer waiting for the job's lease (``lease_wait``) tries again."""


def _acquire(
    catalog: Catalog,
    job: str,
    operation: str,
    timeout: timedelta,
    stale_after: timedelta | None,
    wait: timedelta,
) -> MaintenanceLock:
    deadline = time.monotonic() + wait.total_seconds()
    waited = False
    while True:
        try:
            return catalog.acquire_lease(
                job,
                operation=operation,
                owner=process_owner(),
                timeout=timeout,
                stale_after=stale_after,
            )
        except ConcurrentRunError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                if waited:
                    raise type(exc)(f"{exc} (waited {wait.total_seconds():g} s for it)") from exc
                raise
            if not waited:
                log.info("job %s: %s waits up to %s for the lease: %s", job, operation, wait, exc)
                waited = True
            time.sleep(min(WAIT_INTERVAL.total_seconds(), left))


@contextmanager
def maintenance_lock(
    catalog: Catalog,
    job: str,
    operation: str,
    *,
    stale_after: timedelta | None = None,
    wait: timedelta | None = None,
) -> Iterator[JobLease]:
    """Hold ``job``'s lease for the maintenance ``operation`` (:func:`hold_lease`, waiting
    ``wait`` for it): the lease whose epoch fences the operation's commits
    (:func:`commit_maintenance_checkpoint`)."""
    check_name("job", job)
    with hold_lease(catalog, job, operation, stale_after=stale_after, wait=wait) as lease:
        yield lease


def check_not_locked(catalog: Catalog, job: str) -> None:
    """Refuse to run ``job`` while a maintenance operation holds it (an unknown job is free).

    A run takes the lease itself (:func:`hold_lease`); this is the early check of callers that
    do not write."""
    if not catalog.has_job(job):
        return
    lock = catalog.maintenance_lock(job)
    if lock is not None:
        raise MaintenanceLockedError(
            f"job {job!r} cannot run now: the maintenance operation {lock.operation!r} "
            f"({lock.owner}) holds it since {lock.acquired_at:%Y-%m-%d %H:%M:%S} UTC"
        )


def next_maintenance_checkpoint_id(catalog: Catalog, job: str) -> int:
    """The next free maintenance checkpoint id of ``job``: above every id it has."""
    return max(catalog.highest_checkpoint_id(job) or 0, MAINTENANCE_ID_BASE) + 1


def commit_maintenance_checkpoint(
    catalog: Catalog,
    job: str,
    *,
    lease: JobLease,
    base: CheckpointRecord | None,
    parallelism: int,
    max_parallelism: int,
    commit: Callable[[int, Fence], Sequence[TableVersion]],
    watermark: int | None = None,
    input_identity: str | None = None,
) -> CheckpointRecord:
    """Begin a MAINTENANCE checkpoint on ``base``, run ``commit(checkpoint_id, fence)`` (the
    Delta commits, each fenced by ``fence``; it returns every table of the new checkpoint) and
    complete it with the event-time ``watermark`` of the state it holds (the base's, or the
    restored point's).

    It is fenced as a run is: ``lease`` (the job's, held by the operation) must still hold the
    job when the checkpoint begins, at every Delta commit and when it completes; a writer that
    lost it fails with :class:`~statecore.errors.ConcurrentRunError` and nothing it wrote
    becomes visible (the catalog does not complete the checkpoint, and the tables' next writer
    rolls back what it committed). On any error the checkpoint is marked FAILED (unless a newer
    writer began it again) and the original error propagates: a failure of the catalog while
    marking it is a note on that error.

    ``input_identity`` is the input the state it holds reflects, carried over from the base (or
    the restored point): a maintenance checkpoint processes no input of its own, and a savepoint
    taken from it must still know where a stream's source stood
    (:func:`statecore.spark.savepoint_offsets`).

    The checkpoint records ``parallelism``: the parallelism its operator state was written with.
    It fails, and nothing builds on it, if ``commit`` fails or another checkpoint completed since
    ``base``.
    """
    if lease.job != job:
        raise ConfigError(
            f"a maintenance checkpoint of job {job!r} needs that job's lease, not the lease "
            f"of job {lease.job!r}"
        )
    checkpoint_id = next_maintenance_checkpoint_id(catalog, job)
    catalog.begin_checkpoint(
        job,
        checkpoint_id,
        kind=CheckpointKind.MAINTENANCE,
        parallelism=parallelism,
        max_parallelism=max_parallelism,
        restored_from=None if base is None else base.checkpoint_id,
        epoch=lease.epoch,
        input_identity=input_identity,
    )
    try:
        tables = commit(checkpoint_id, lease.fence)
        latest = catalog.latest_restorable(job)
        if (latest and latest.checkpoint_id) != (base and base.checkpoint_id):
            raise CheckpointCommitError(
                f"job {job!r}: checkpoint {latest and latest.checkpoint_id} completed while "
                f"maintenance checkpoint {checkpoint_id} was being written on checkpoint "
                f"{base and base.checkpoint_id}; run the operation again"
            )
        lease.check()  # a lease lost in the renewer is refused here already
        return catalog.complete_checkpoint(
            job, checkpoint_id, tables=tables, epoch=lease.epoch, watermark=watermark
        )
    except BaseException as exc:
        fail_quietly(catalog, job, checkpoint_id, exc, epoch=lease.epoch)
        raise


def fail_quietly(
    catalog: Catalog, job: str, checkpoint_id: int, exc: BaseException, *, epoch: int | None
) -> None:
    """Mark ``checkpoint_id`` FAILED for ``exc`` (unless the writer of another epoch began it
    again). Never raises: when the catalog fails, ``exc`` (the error that failed the
    checkpoint, which the caller re-raises) gets a note of it, and it is logged; the
    checkpoint then stays IN_PROGRESS and the job's next writer fails it."""
    try:
        catalog.fail_checkpoint(
            job, checkpoint_id, error=f"{type(exc).__name__}: {exc}", epoch=epoch
        )
    except Exception as error:
        note = f"job {job}: checkpoint {checkpoint_id} could not be marked FAILED: {error!r}"
        log.error("%s (while failing on %s: %s)", note, type(exc).__name__, exc)
        exc.add_note(note)
