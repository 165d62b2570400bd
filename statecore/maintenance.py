"""What every maintenance operation shares: the job's maintenance lock and maintenance checkpoints.

Savepoint, rescale, TTL cleanup, retention, restore and repair each hold the job's lock (a row in
the catalog) for their whole run, so two of them never interleave, and a job run refuses to start
while one holds it. An operation that changes the state commits it as a new MAINTENANCE
checkpoint: numbered from :data:`MAINTENANCE_ID_BASE` so it never takes an id the job will use
(dates, micro-batch ids), based on the latest completed checkpoint, and completed only if that is
still the latest one, so a job run that completed meanwhile is never overwritten.
"""

from __future__ import annotations

import os
import socket
import uuid
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
from statecore.errors import CheckpointCommitError, MaintenanceLockedError

__all__ = [
    "MAINTENANCE_ID_BASE",
    "check_not_locked",
    "commit_maintenance_checkpoint",
    "maintenance_lock",
    "next_maintenance_checkpoint_id",
]

MAINTENANCE_ID_BASE = 10**18
"""Maintenance checkpoints are numbered from here up (the catalog's ids are 64-bit)."""


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@contextmanager
def maintenance_lock(
    catalog: Catalog, job: str, operation: str, *, stale_after: timedelta | None = None
) -> Iterator[MaintenanceLock]:
    """Hold ``job`` for ``operation``; :class:`MaintenanceLockedError` if another one holds it."""
    lock = catalog.acquire_maintenance_lock(job, operation=operation, owner=_owner(),
                                            stale_after=stale_after)
    try:
        yield lock
    finally:
        catalog.release_maintenance_lock(job, owner=lock.owner)


def check_not_locked(catalog: Catalog, job: str) -> None:
    """Refuse to run ``job`` while a maintenance operation holds it (an unknown job is free)."""
    if job not in {j.name for j in catalog.list_jobs()}:
        return
    lock = catalog.maintenance_lock(job)
    if lock is not None:
        raise MaintenanceLockedError(
            f"job {job!r} cannot run now: the maintenance operation {lock.operation!r} "
            f"({lock.owner}) holds it since {lock.acquired_at:%Y-%m-%d %H:%M:%S} UTC"
        )


def next_maintenance_checkpoint_id(catalog: Catalog, job: str) -> int:
    """The next free maintenance checkpoint id of ``job``."""
    ids = [c.checkpoint_id for c in catalog.list_checkpoints(job)
           if c.checkpoint_id >= MAINTENANCE_ID_BASE]
    return max(ids, default=MAINTENANCE_ID_BASE) + 1


def commit_maintenance_checkpoint(
    catalog: Catalog,
    job: str,
    *,
    base: CheckpointRecord | None,
    parallelism: int,
    max_parallelism: int,
    commit: Callable[[int], Sequence[TableVersion]],
) -> CheckpointRecord:
    """Begin a MAINTENANCE checkpoint on ``base``, run ``commit(checkpoint_id)`` (the Delta
    commits; it returns every table of the new checkpoint) and complete it.

    The checkpoint records ``parallelism``: the parallelism its operator state was written with.
    It fails, and nothing builds on it, if ``commit`` fails or another checkpoint completed since
    ``base``.
    """
    checkpoint_id = next_maintenance_checkpoint_id(catalog, job)
    catalog.begin_checkpoint(job, checkpoint_id, kind=CheckpointKind.MAINTENANCE,
                             parallelism=parallelism, max_parallelism=max_parallelism,
                             restored_from=None if base is None else base.checkpoint_id)
    try:
        tables = commit(checkpoint_id)
        latest = catalog.latest_checkpoint(job)
        if (latest and latest.checkpoint_id) != (base and base.checkpoint_id):
            raise CheckpointCommitError(
                f"job {job!r}: checkpoint {latest and latest.checkpoint_id} completed while "
                f"maintenance checkpoint {checkpoint_id} was being written on checkpoint "
                f"{base and base.checkpoint_id}; run the operation again"
            )
        return catalog.complete_checkpoint(job, checkpoint_id, tables=tables)
    except BaseException as exc:
        catalog.fail_checkpoint(job, checkpoint_id, error=f"{type(exc).__name__}: {exc}")
        raise
