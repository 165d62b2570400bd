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

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from statecore.catalog.engine import WRITE, create_engine, redacted
from statecore.catalog.lookup import find_checkpoint, load_checkpoint, load_job
from statecore.catalog.migrations import migrate
from statecore.catalog.models import (
    CheckpointRow,
    CheckpointTableRow,
    JobRow,
    MaintenanceLockRow,
    SavepointRow,
    StateRow,
)
from statecore.catalog.records import (
    CheckpointKind,
    CheckpointRecord,
    CheckpointStatus,
    JobRecord,
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
from statecore.errors import (
    CheckpointCommitError,
    CheckpointNotFoundError,
    ConfigError,
    MaintenanceLockedError,
)

__all__ = ["Catalog"]

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
        """Open the catalog at ``url``, applying any missing schema migration."""
        engine = create_engine(url)
        try:
            migrate(engine)
        except sa.exc.OperationalError as exc:
            engine.dispose()
            raise ConfigError(f"cannot open checkpoint catalog {redacted(url)}: {exc}") from exc
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

    @property
    def url(self) -> str:
        """The catalog's URL, without its password."""
        return redacted(self._engine.url)

    def close(self) -> None:
        """Release the catalog's database connections."""
        self._engine.dispose()

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
    ) -> CheckpointRecord:
        """Start checkpoint ``checkpoint_id`` of ``job``.

        A checkpoint that already COMPLETED (or completed and EXPIRED since) is returned
        unchanged (a replay: the caller does nothing); one that is IN_PROGRESS or FAILED starts
        again (a retry).
        """
        check_checkpoint_id(job, checkpoint_id)
        check_parallelism(job, parallelism, max_parallelism)
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            row = find_checkpoint(session, job_row, checkpoint_id)
            if row is not None and row.status in (_COMPLETED, _EXPIRED):
                return row.to_record(job)
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
            return row.to_record(job)

    def complete_checkpoint(
        self, job: str, checkpoint_id: int, *, tables: Sequence[TableVersion]
    ) -> CheckpointRecord:
        """Record ``tables`` and complete the checkpoint, in one transaction.

        :class:`CheckpointCommitError` if the checkpoint is not IN_PROGRESS or the commit fails;
        then nothing of it changed.
        """
        where = f"checkpoint {checkpoint_id} of job {job!r}"
        check_tables(where, tables)
        try:
            with self._write.begin() as session:
                job_row = load_job(session, job, lock=True)
                row = load_checkpoint(session, job_row, checkpoint_id)
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
                session.flush()
                record = row.to_record(job)
        except sa.exc.SQLAlchemyError as exc:
            raise CheckpointCommitError(f"{where}: the catalog commit failed: {exc}") from exc
        return record

    def fail_checkpoint(self, job: str, checkpoint_id: int, *, error: str) -> CheckpointRecord:
        """Mark the checkpoint FAILED with ``error``; a COMPLETED one is never failed."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            row = load_checkpoint(session, job_row, checkpoint_id)
            if row.status == _COMPLETED:
                raise CheckpointCommitError(
                    f"checkpoint {checkpoint_id} of job {job!r} is COMPLETED and cannot fail "
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
        self, job: str, *, status: CheckpointStatus | None = None
    ) -> list[CheckpointRecord]:
        """The checkpoints of ``job`` (with ``status`` if given), by checkpoint id."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            query = sa.select(CheckpointRow).where(CheckpointRow.job_id == job_row.id)
            if status is not None:
                query = query.where(CheckpointRow.status == status.name)
            rows = session.scalars(query.order_by(CheckpointRow.checkpoint_id))
            return [row.to_record(job) for row in rows]

    def delete_checkpoint(self, job: str, checkpoint_id: int) -> None:
        """Forget checkpoint ``checkpoint_id`` of ``job`` and its table versions."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            session.delete(load_checkpoint(session, job_row, checkpoint_id))

    def expire_checkpoints(
        self, job: str, checkpoint_ids: Iterable[int]
    ) -> list[CheckpointRecord]:
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

    # maintenance locks

    def acquire_maintenance_lock(
        self, job: str, *, operation: str, owner: str, stale_after: timedelta | None = None
    ) -> MaintenanceLock:
        """Hold ``job`` for one maintenance operation.

        :class:`MaintenanceLockedError` names the operation that holds it already, unless that
        lock is older than ``stale_after`` (then it is taken over).
        """
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            row = session.get(MaintenanceLockRow, job_row.id)
            now = _now()
            if row is not None:
                if stale_after is None or now - row.acquired_at < stale_after:
                    raise MaintenanceLockedError(
                        f"job {job!r} is held by the maintenance operation {row.operation!r} "
                        f"({row.owner}) since {row.acquired_at:%Y-%m-%d %H:%M:%S} UTC; wait for "
                        f"it to finish, or if it died, release it with `statecore unlock {job}`"
                    )
                session.delete(row)
                session.flush()
            row = MaintenanceLockRow(
                job_id=job_row.id, operation=operation, owner=owner, acquired_at=now
            )
            session.add(row)
            return row.to_record(job)

    def release_maintenance_lock(
        self, job: str, *, owner: str | None = None
    ) -> MaintenanceLock | None:
        """Release the job's maintenance lock (only if ``owner`` holds it, when given)."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            row = session.get(MaintenanceLockRow, job_row.id)
            if row is None or (owner is not None and row.owner != owner):
                return None
            session.delete(row)
            return row.to_record(job)

    def maintenance_lock(self, job: str) -> MaintenanceLock | None:
        """The maintenance operation holding ``job``, or ``None``."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            row = session.get(MaintenanceLockRow, job_row.id)
            return None if row is None else row.to_record(job)


def _now() -> datetime:
    return datetime.now(UTC)
