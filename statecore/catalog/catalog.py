"""The checkpoint catalog: jobs, their registered states, checkpoints, savepoints and locks.

A checkpoint is *complete* when :meth:`Catalog.complete_checkpoint` has committed, in one
database transaction, the Delta version of every table it restores from. Every write locks the
job's row first (``SELECT ... FOR UPDATE`` on Postgres, ``BEGIN IMMEDIATE`` on SQLite), so
concurrent writers of one job are serialized.

>>> with Catalog.connect("sqlite://") as catalog:
...     _ = catalog.ensure_job("clicks", parallelism=2, max_parallelism=128)
...     _ = catalog.begin_checkpoint("clicks", 1, kind=CheckpointKind.CHECKPOINT,
...                                  parallelism=2, max_parallelism=128)
...     done = catalog.complete_checkpoint("clicks", 1, tables=[])
...     catalog.latest_checkpoint("clicks") == done
True
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, noload, sessionmaker

from statecore.catalog.engine import (
    WRITE,
    catalog_location,
    discard_engine,
    redacted,
    shared_engine,
)
from statecore.catalog.lookup import find_checkpoint, load_checkpoint, load_job
from statecore.catalog.migrations import migrate
from statecore.catalog.models import (
    CheckpointRow,
    CheckpointTableRow,
    JobRow,
    LiveEndpointRow,
    MaintenanceLockRow,
    SavepointRow,
    StateRow,
)
from statecore.catalog.records import (
    CheckpointKind,
    CheckpointRecord,
    CheckpointStatus,
    JobRecord,
    LiveEndpoint,
    MaintenanceLock,
    SavepointRecord,
    StateRecord,
    TableVersion,
)
from statecore.catalog.validation import (
    check_checkpoint_id,
    check_name,
    check_parallelism,
    check_states,
    check_tables,
)
from statecore.config import DEFAULT_LEASE_TIMEOUT
from statecore.errors import (
    CatalogError,
    CheckpointCommitError,
    CheckpointNotFoundError,
    CheckpointOrderError,
    ConcurrentRunError,
    ConfigError,
    MaintenanceLockedError,
    ReplayMismatchError,
)

__all__ = ["RUN_OPERATION", "Catalog"]

_IN_PROGRESS = CheckpointStatus.IN_PROGRESS.name
_COMPLETED = CheckpointStatus.COMPLETED.name
_EXPIRED = CheckpointStatus.EXPIRED.name


class Catalog:
    """The checkpoint catalog in a SQLAlchemy database; open it with :meth:`connect`."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._read = sessionmaker(engine, expire_on_commit=False)
        self._write = sessionmaker(engine.execution_options(**WRITE), expire_on_commit=False)

    @classmethod
    def connect(cls, url: str) -> Catalog:
        """Open the catalog at ``url``, applying any missing schema migration. The process
        shares one engine per catalog (:func:`~statecore.catalog.engine.shared_engine`)."""
        engine = shared_engine(url)
        try:
            migrate(engine)
        except sa.exc.OperationalError as exc:
            discard_engine(engine)
            raise ConfigError(f"cannot open checkpoint catalog {redacted(url)}: {exc}") from exc
        except sa.exc.DatabaseError as exc:  # e.g. SQLite: "file is not a database", "malformed"
            discard_engine(engine)
            raise CatalogError(
                f"the checkpoint catalog {catalog_location(engine)} is corrupt or not a "
                f"statecore catalog: {exc.orig}. Restore the file from a backup (a missing "
                "catalog over an existing warehouse is not a fresh start)"
            ) from exc
        except BaseException:
            discard_engine(engine)
            raise
        return cls(engine)

    @property
    def url(self) -> str:
        """The catalog's URL, without its password."""
        return redacted(self._engine.url)

    def close(self) -> None:
        """Done with the catalog: its connections are back in the shared engine's pool."""

    def __enter__(self) -> Catalog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Catalog({self.url!r})"

    # jobs

    def ensure_job(self, job: str, *, parallelism: int, max_parallelism: int) -> JobRecord:
        """Register ``job`` if it is new; an existing job is returned unchanged."""
        check_name("job", job)
        check_parallelism(job, parallelism, max_parallelism)
        try:
            with self._write.begin() as session:
                row = session.scalar(sa.select(JobRow).where(JobRow.name == job))
                if row is None:
                    row = JobRow(
                        name=job,
                        parallelism=parallelism,
                        max_parallelism=max_parallelism,
                        created_at=_now(),
                        last_completion_seq=0,
                    )
                    session.add(row)
                return row.to_record()
        except sa.exc.IntegrityError:  # registered concurrently by another process
            return self.get_job(job)

    def get_job(self, job: str) -> JobRecord:
        """The job named ``job``; :class:`JobNotFoundError` if the catalog does not know it."""
        check_name("job", job)
        with self._read.begin() as session:
            return load_job(session, job).to_record()

    def list_jobs(self) -> list[JobRecord]:
        """Every job, by name."""
        with self._read.begin() as session:
            rows = session.scalars(sa.select(JobRow).order_by(JobRow.name))
            return [row.to_record() for row in rows]

    def set_job_parallelism(
        self, job: str, *, parallelism: int, max_parallelism: int | None = None
    ) -> JobRecord:
        """Record a rescale of ``job``; its max parallelism stays unless given."""
        with self._write.begin() as session:
            row = load_job(session, job, lock=True)
            max_parallelism = row.max_parallelism if max_parallelism is None else max_parallelism
            check_parallelism(job, parallelism, max_parallelism)
            row.parallelism = parallelism
            row.max_parallelism = max_parallelism
            return row.to_record()

    # states

    def register_states(self, job: str, operator: str, states: Sequence[StateRecord]) -> None:
        """Insert or update (by name) the states of ``operator`` in ``job``."""
        check_states(job, operator, states)
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            existing = {
                row.name: row
                for row in session.scalars(
                    sa.select(StateRow).where(
                        StateRow.job_id == job_row.id, StateRow.operator == operator
                    )
                )
            }
            now = _now()
            for state in states:
                row = existing.get(state.name)
                if row is None:
                    row = StateRow(job_id=job_row.id, operator=operator, name=state.name)
                    session.add(row)
                row.kind = state.kind
                row.descriptor = dict(state.descriptor)
                row.schema = state.schema
                row.ttl = None if state.ttl is None else dict(state.ttl)
                row.registered_at = now

    def list_states(self, job: str, operator: str | None = None) -> list[StateRecord]:
        """The registered states of ``job`` (of one operator if given), by operator and name."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            query = sa.select(StateRow).where(StateRow.job_id == job_row.id)
            if operator is not None:
                query = query.where(StateRow.operator == operator)
            rows = session.scalars(query.order_by(StateRow.operator, StateRow.name))
            return [row.to_record(job) for row in rows]

    # checkpoints

    def begin_checkpoint(
        self,
        job: str,
        checkpoint_id: int,
        *,
        kind: CheckpointKind,
        parallelism: int,
        max_parallelism: int,
        restored_from: int | None = None,
        epoch: int | None = None,
        input_identity: str | None = None,
        increasing: bool = False,
    ) -> CheckpointRecord:
        """Start checkpoint ``checkpoint_id`` of ``job``.

        A checkpoint that already COMPLETED (or completed and EXPIRED since) is returned
        unchanged (a replay: the caller does nothing), unless its recorded ``input_identity``
        differs from the one given (:class:`ReplayMismatchError`); one that is IN_PROGRESS or
        FAILED starts again (a retry). With ``increasing``, an id below the latest completed
        CHECKPOINT's is refused (:class:`CheckpointOrderError`). With ``epoch``, the lease of
        that epoch must hold the job (:class:`ConcurrentRunError`), and the checkpoint
        records it.
        """
        check_checkpoint_id(job, checkpoint_id)
        check_parallelism(job, parallelism, max_parallelism)
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            if epoch is not None:
                _check_epoch(session, job_row, epoch)
            row = find_checkpoint(session, job_row, checkpoint_id)
            if row is not None and row.status in (_COMPLETED, _EXPIRED):
                _check_replay(row, job, input_identity)
                return row.to_record(job)
            if increasing:
                latest = _latest_checkpoint_id(session, job_row)
                if latest is not None and checkpoint_id < latest:
                    raise CheckpointOrderError(
                        f"checkpoint {checkpoint_id} of job {job!r} is below its latest "
                        f"completed checkpoint {latest}: checkpoint ids must increase (a "
                        "completed id replays as a no-op; a new run takes a larger id)"
                    )
            if row is None:
                row = CheckpointRow(job_id=job_row.id, checkpoint_id=checkpoint_id)
                session.add(row)
            row.tables = []
            row.kind = kind.name
            row.status = _IN_PROGRESS
            row.parallelism = parallelism
            row.max_parallelism = max_parallelism
            row.started_at = _now()
            row.completed_at = None
            row.completion_seq = None
            row.restored_from = restored_from
            row.error = None
            row.epoch = epoch
            row.input_identity = input_identity
            return row.to_record(job)

    # -- live lookups ----------------------------------------------------------------------
    def live_token(self, job: str, *, create: bool = False) -> str | None:
        """The job's token for its tasks' live endpoints (made once with ``create``)."""
        with (self._write if create else self._read).begin() as session:
            row = load_job(session, job, lock=create)
            if row.live_token is None and create:
                row.live_token = secrets.token_urlsafe(32)
            return row.live_token

    def set_live_endpoints(
        self, job: str, operator: str, endpoints: Sequence[LiveEndpoint]
    ) -> None:
        """Replace where ``operator``'s tasks serve live lookups (none: its run served none)."""
        with self._write.begin() as session:
            row = load_job(session, job, lock=True)
            session.execute(
                sa.delete(LiveEndpointRow).where(
                    LiveEndpointRow.job_id == row.id, LiveEndpointRow.operator == operator
                )
            )
            now = _now()
            session.add_all(
                LiveEndpointRow(
                    job_id=row.id,
                    operator=operator,
                    subtask=e.subtask,
                    key_group_start=e.key_group_start,
                    key_group_end=e.key_group_end,
                    address=e.address,
                    checkpoint_id=e.checkpoint_id,
                    updated_at=now,
                )
                for e in endpoints
            )

    def live_endpoints(self, job: str) -> list[LiveEndpoint]:
        """Where the tasks of ``job``'s latest live run serve its state."""
        with self._read.begin() as session:
            row = load_job(session, job)
            rows = session.scalars(
                sa.select(LiveEndpointRow)
                .where(LiveEndpointRow.job_id == row.id)
                .order_by(LiveEndpointRow.operator, LiveEndpointRow.subtask)
            )
            return [r.to_record(job) for r in rows]

    def latest_checkpoint_id(self, job: str) -> int | None:
        """The largest id of a completed (or expired) CHECKPOINT of ``job``: a new run's id
        must not be below it."""
        with self._read.begin() as session:
            return _latest_checkpoint_id(session, load_job(session, job))

    def complete_checkpoint(
        self,
        job: str,
        checkpoint_id: int,
        *,
        tables: Sequence[TableVersion],
        epoch: int | None = None,
        metrics: Mapping[str, Any] | None = None,
        watermark: int | None = None,
    ) -> CheckpointRecord:
        """Record ``tables`` (the run's ``metrics``, JSON, and its event-time ``watermark``, epoch
        ms) and complete the checkpoint, in one transaction.

        :class:`CheckpointCommitError` if the checkpoint is not IN_PROGRESS or the commit fails,
        :class:`ConcurrentRunError` if ``epoch`` is given and its lease no longer holds the job
        (checked under the job's row lock, in the same transaction); then nothing of it changed.
        """
        where = f"checkpoint {checkpoint_id} of job {job!r}"
        check_tables(where, tables)
        try:
            with self._write.begin() as session:
                job_row = load_job(session, job, lock=True)
                if epoch is not None:
                    _check_epoch(session, job_row, epoch)
                row = load_checkpoint(session, job_row, checkpoint_id)
                if epoch is not None and row.epoch != epoch:
                    raise ConcurrentRunError(
                        f"{where} was begun again by the writer of epoch {row.epoch}; the "
                        f"writer of epoch {epoch} cannot complete it"
                    )
                if row.status != _IN_PROGRESS:
                    raise CheckpointCommitError(
                        f"{where} is {row.status}, not IN_PROGRESS: it cannot complete "
                        "(begin it again to retry)"
                    )
                job_row.last_completion_seq += 1
                row.tables = [CheckpointTableRow.from_record(table) for table in tables]
                row.status = _COMPLETED
                row.completed_at = _now()
                row.completion_seq = job_row.last_completion_seq
                row.error = None
                row.metrics = dict(metrics) if metrics else None
                row.watermark = watermark
                session.flush()
                record = row.to_record(job)
        except sa.exc.SQLAlchemyError as exc:
            raise CheckpointCommitError(f"{where}: the catalog commit failed: {exc}") from exc
        return record

    def fail_checkpoint(
        self, job: str, checkpoint_id: int, *, error: str, epoch: int | None = None
    ) -> CheckpointRecord:
        """Mark the checkpoint FAILED with ``error``; a COMPLETED (or EXPIRED) one is never
        failed: :meth:`begin_checkpoint` replays both. With ``epoch``, a checkpoint that another
        writer's epoch began again is left alone."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            row = load_checkpoint(session, job_row, checkpoint_id)
            if epoch is not None and row.epoch is not None and row.epoch != epoch:
                return row.to_record(job)
            if row.status in (_COMPLETED, _EXPIRED):
                raise CheckpointCommitError(
                    f"checkpoint {checkpoint_id} of job {job!r} is {row.status} and cannot fail "
                    f"({error})"
                )
            row.status = CheckpointStatus.FAILED.name
            row.error = error
            return row.to_record(job)

    def latest_checkpoint(
        self,
        job: str,
        *,
        kinds: Iterable[CheckpointKind] = (CheckpointKind.CHECKPOINT, CheckpointKind.MAINTENANCE),
    ) -> CheckpointRecord | None:
        """The checkpoint of one of ``kinds`` that completed last, or ``None``."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            row = session.scalar(
                sa.select(CheckpointRow)
                .where(
                    CheckpointRow.job_id == job_row.id,
                    CheckpointRow.status == _COMPLETED,
                    CheckpointRow.kind.in_([kind.name for kind in kinds]),
                )
                .order_by(CheckpointRow.completion_seq.desc())
                .limit(1)
            )
            return None if row is None else row.to_record(job)

    def get_checkpoint(self, job: str, checkpoint_id: int) -> CheckpointRecord:
        """Checkpoint ``checkpoint_id`` of ``job``; :class:`CheckpointNotFoundError` if none."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            return load_checkpoint(session, job_row, checkpoint_id).to_record(job)

    def list_checkpoints(
        self, job: str, *, status: CheckpointStatus | None = None, with_tables: bool = True
    ) -> list[CheckpointRecord]:
        """The checkpoints of ``job`` (with ``status`` if given), by checkpoint id; without
        their table versions (``tables`` empty, one query less) unless ``with_tables``."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            query = sa.select(CheckpointRow).where(CheckpointRow.job_id == job_row.id)
            if not with_tables:
                query = query.options(noload(CheckpointRow.tables))
            if status is not None:
                query = query.where(CheckpointRow.status == status.name)
            rows = session.scalars(query.order_by(CheckpointRow.checkpoint_id))
            return [row.to_record(job) for row in rows]

    def delete_checkpoint(self, job: str, checkpoint_id: int) -> None:
        """Forget checkpoint ``checkpoint_id`` of ``job`` and its table versions."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            session.delete(load_checkpoint(session, job_row, checkpoint_id))

    def expire_checkpoints(self, job: str, checkpoint_ids: Iterable[int]) -> list[CheckpointRecord]:
        """Mark completed checkpoints EXPIRED and forget their table versions, in one transaction.

        The rows stay (re-running an expired checkpoint id is still a replay); the latest
        completed checkpoint is never expired.
        """
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            latest = session.scalar(
                sa.select(CheckpointRow.checkpoint_id)
                .where(CheckpointRow.job_id == job_row.id, CheckpointRow.status == _COMPLETED)
                .order_by(CheckpointRow.completion_seq.desc())
                .limit(1)
            )
            expired = []
            for checkpoint_id in checkpoint_ids:
                row = load_checkpoint(session, job_row, checkpoint_id)
                if row.status != _COMPLETED:
                    raise ConfigError(
                        f"checkpoint {checkpoint_id} of job {job!r} is {row.status}: only a "
                        "COMPLETED checkpoint expires"
                    )
                if checkpoint_id == latest:
                    raise ConfigError(
                        f"checkpoint {checkpoint_id} is the latest completed checkpoint of job "
                        f"{job!r}: it is never expired"
                    )
                row.status = _EXPIRED
                row.tables = []
                expired.append(row)
            session.flush()
            return [row.to_record(job) for row in expired]

    # savepoints

    def add_savepoint(self, savepoint: SavepointRecord) -> SavepointRecord:
        """Record a savepoint that was written completely; its name is unique per job."""
        check_name("savepoint", savepoint.name)
        try:
            with self._write.begin() as session:
                job_row = load_job(session, savepoint.job, lock=True)
                row = SavepointRow(
                    job_id=job_row.id,
                    name=savepoint.name,
                    path=savepoint.path,
                    reason=savepoint.reason,
                    source_checkpoint=savepoint.source_checkpoint,
                    parallelism=savepoint.parallelism,
                    max_parallelism=savepoint.max_parallelism,
                    rows=savepoint.rows,
                    bytes=savepoint.bytes,
                    created_at=savepoint.created_at,
                )
                session.add(row)
                session.flush()
                return row.to_record(savepoint.job)
        except sa.exc.IntegrityError as exc:
            raise ConfigError(
                f"job {savepoint.job!r} already has a savepoint named {savepoint.name!r}"
            ) from exc

    def list_savepoints(self, job: str | None = None) -> list[SavepointRecord]:
        """The savepoints of ``job`` (of every job when ``None``), oldest first."""
        with self._read.begin() as session:
            query = sa.select(SavepointRow, JobRow.name).join(
                JobRow, SavepointRow.job_id == JobRow.id
            )
            if job is not None:
                query = query.where(SavepointRow.job_id == load_job(session, job).id)
            rows = session.execute(query.order_by(SavepointRow.created_at, SavepointRow.id))
            return [row.to_record(name) for row, name in rows]

    def get_savepoint(self, job: str, name: str) -> SavepointRecord:
        """Savepoint ``name`` of ``job``; :class:`CheckpointNotFoundError` if none."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            row = session.scalar(
                sa.select(SavepointRow).where(
                    SavepointRow.job_id == job_row.id, SavepointRow.name == name
                )
            )
            if row is None:
                names = session.scalars(
                    sa.select(SavepointRow.name)
                    .where(SavepointRow.job_id == job_row.id)
                    .order_by(SavepointRow.created_at)
                )
                known = ", ".join(names) or "none"
                raise CheckpointNotFoundError(
                    f"job {job!r} has no savepoint named {name!r}; its savepoints: {known}"
                )
            return row.to_record(job)

    # the job's lease: held by a run or a maintenance operation

    def acquire_lease(
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
        ``stale_after``, or when its holder is a process of this host that is gone; otherwise
        :class:`ConcurrentRunError` (:class:`MaintenanceLockedError` when a maintenance
        operation holds it) names the holder.
        """
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            row = session.get(MaintenanceLockRow, job_row.id)
            now = _now()
            if row is not None:
                held = row.to_record(job)
                if not _may_take_over(held, now, stale_after):
                    raise _held_error(held, now)
                session.delete(row)
                session.flush()
            job_row.lease_epoch += 1
            row = MaintenanceLockRow(
                job_id=job_row.id,
                operation=operation,
                owner=owner,
                acquired_at=now,
                epoch=job_row.lease_epoch,
                expires_at=now + timeout,
            )
            session.add(row)
            return row.to_record(job)

    def renew_lease(self, job: str, *, epoch: int, timeout: timedelta) -> MaintenanceLock | None:
        """Extend the lease of ``epoch`` to ``timeout`` from now; ``None`` if it was lost."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            row = session.get(MaintenanceLockRow, job_row.id)
            if row is None or row.epoch != epoch:
                return None
            row.expires_at = _now() + timeout
            return row.to_record(job)

    def check_lease(self, job: str, *, epoch: int) -> None:
        """:class:`ConcurrentRunError` unless the lease of ``epoch`` still holds ``job``."""
        with self._read.begin() as session:
            _check_epoch(session, load_job(session, job), epoch)

    def acquire_maintenance_lock(
        self,
        job: str,
        *,
        operation: str,
        owner: str,
        stale_after: timedelta | None = None,
        timeout: timedelta = DEFAULT_LEASE_TIMEOUT,
    ) -> MaintenanceLock:
        """Hold ``job`` for one maintenance operation (:meth:`acquire_lease`)."""
        return self.acquire_lease(
            job, operation=operation, owner=owner, timeout=timeout, stale_after=stale_after
        )

    def release_maintenance_lock(
        self, job: str, *, owner: str | None = None
    ) -> MaintenanceLock | None:
        """Release the job's lease (only if ``owner`` holds it, when given). A writer whose
        lease was released fails at its next commit."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            row = session.get(MaintenanceLockRow, job_row.id)
            if row is None or (owner is not None and row.owner != owner):
                return None
            session.delete(row)
            return row.to_record(job)

    def maintenance_lock(self, job: str) -> MaintenanceLock | None:
        """The lease holding ``job`` (a run or a maintenance operation), or ``None``."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            row = session.get(MaintenanceLockRow, job_row.id)
            return None if row is None else row.to_record(job)


def _latest_checkpoint_id(session: Session, job_row: JobRow) -> int | None:
    latest = session.scalar(
        sa.select(sa.func.max(CheckpointRow.checkpoint_id)).where(
            CheckpointRow.job_id == job_row.id,
            CheckpointRow.kind == CheckpointKind.CHECKPOINT.name,
            CheckpointRow.status.in_([_COMPLETED, _EXPIRED]),
        )
    )
    return None if latest is None else int(latest)


def _check_replay(row: CheckpointRow, job: str, input_identity: str | None) -> None:
    if input_identity is None or row.input_identity is None:
        return
    if input_identity != row.input_identity:
        raise ReplayMismatchError(
            f"checkpoint {row.checkpoint_id} of job {job!r} is {row.status} with input "
            f"{row.input_identity}; this run replays it with input {input_identity}: a "
            "checkpoint id stands for one input (give new data a new checkpoint id)"
        )


RUN_OPERATION = "run"
"""The operation of a lease held by a run of the job (``run`` + the checkpoint id)."""


def _is_run(lease: MaintenanceLock) -> bool:
    return lease.operation.split(" ", 1)[0] == RUN_OPERATION


def _may_take_over(held: MaintenanceLock, now: datetime, stale_after: timedelta | None) -> bool:
    if held.expires_at is not None and held.expires_at <= now:
        return True
    if stale_after is not None and now - held.acquired_at >= stale_after:
        return True
    return _gone(held.owner)


def _gone(owner: str) -> bool:
    """Whether ``owner`` (``host:pid:...``) is a process of this host that no longer exists."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _describe(lease: MaintenanceLock) -> str:
    what = "the run" if _is_run(lease) else "the maintenance operation"
    expires = "" if lease.expires_at is None else f", lease expires {lease.expires_at:%H:%M:%S} UTC"
    return (
        f"{what} {lease.operation!r} ({lease.owner}) since "
        f"{lease.acquired_at:%Y-%m-%d %H:%M:%S} UTC (epoch {lease.epoch}{expires})"
    )


def _held_error(held: MaintenanceLock, now: datetime) -> ConcurrentRunError:
    message = (
        f"job {held.job!r} is held by {_describe(held)}; wait for it to finish, or if it "
        f"died, release it with `statecore unlock {held.job}`"
    )
    return ConcurrentRunError(message) if _is_run(held) else MaintenanceLockedError(message)


def _check_epoch(session: Session, job_row: JobRow, epoch: int) -> None:
    row = session.get(MaintenanceLockRow, job_row.id)
    if row is not None and row.epoch == epoch:
        return
    now = "released" if row is None else f"now held by {_describe(row.to_record(job_row.name))}"
    raise ConcurrentRunError(
        f"job {job_row.name!r}: the lease of epoch {epoch} was lost ({now}); this writer's "
        "commits are refused and nothing it wrote becomes visible"
    )


def _now() -> datetime:
    return datetime.now(UTC)
