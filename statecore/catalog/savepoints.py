"""The savepoints the catalog records, pins and exports, unique by name per job."""

from __future__ import annotations

import sqlalchemy as sa

from statecore.catalog.lookup import load_job
from statecore.catalog.models import JobRow, SavepointRow
from statecore.catalog.records import SavepointRecord
from statecore.catalog.store import Store
from statecore.catalog.validation import check_name
from statecore.errors import CheckpointNotFoundError, ConfigError

__all__ = ["SavepointStore"]


class SavepointStore(Store):
    """Savepoints by job and name; a lookup by name reads one row."""

    def add(self, savepoint: SavepointRecord) -> SavepointRecord:
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
                    pin=savepoint.pin,
                )
                session.add(row)
                session.flush()
                return row.to_record(savepoint.job)
        except sa.exc.IntegrityError as exc:
            raise ConfigError(
                f"job {savepoint.job!r} already has a savepoint named {savepoint.name!r}"
            ) from exc

    def every(self, job: str | None = None) -> list[SavepointRecord]:
        """The savepoints of ``job`` (of every job when ``None``), oldest first."""
        with self._read.begin() as session:
            query = sa.select(SavepointRow, JobRow.name).join(
                JobRow, SavepointRow.job_id == JobRow.id
            )
            if job is not None:
                query = query.where(SavepointRow.job_id == load_job(session, job).id)
            rows = session.execute(query.order_by(SavepointRow.created_at, SavepointRow.id))
            return [row.to_record(name) for row, name in rows]

    def delete(self, job: str, name: str) -> SavepointRecord:
        """Forget savepoint ``name`` of ``job`` (a pin releases its table versions); the record
        it was. :class:`CheckpointNotFoundError` (naming the job's savepoints) if none."""
        record = self.get(job, name)
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            session.execute(
                sa.delete(SavepointRow).where(
                    SavepointRow.job_id == job_row.id, SavepointRow.name == name
                )
            )
        return record

    def get(self, job: str, name: str) -> SavepointRecord:
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
