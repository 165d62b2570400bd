"""The jobs of the catalog and the states their operators registered."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from statecore.catalog.lookup import load_job
from statecore.catalog.models import JobRow, StateRow
from statecore.catalog.records import JobRecord, StateRecord
from statecore.catalog.store import Store, now
from statecore.catalog.validation import check_name, check_parallelism, check_states

__all__ = ["JobStore", "upsert_states"]


class JobStore(Store):
    """Jobs by name, and their registered states; a lookup by name reads one row."""

    def ensure(self, job: str, *, parallelism: int, max_parallelism: int) -> JobRecord:
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
                        created_at=now(),
                        last_completion_seq=0,
                    )
                    session.add(row)
                return row.to_record()
        except sa.exc.IntegrityError:  # registered concurrently by another process
            return self.get(job)

    def get(self, job: str) -> JobRecord:
        """The job named ``job``; :class:`JobNotFoundError` if the catalog does not know it."""
        check_name("job", job)
        with self._read.begin() as session:
            return load_job(session, job).to_record()

    def find(self, job: str) -> JobRecord | None:
        """The job named ``job``, or ``None``: one row."""
        with self._read.begin() as session:
            row = session.scalar(sa.select(JobRow).where(JobRow.name == job))
            return None if row is None else row.to_record()

    def exists(self, job: str) -> bool:
        """Whether the catalog knows ``job``: one row."""
        with self._read.begin() as session:
            return session.scalar(sa.select(JobRow.id).where(JobRow.name == job)) is not None

    def every(self) -> list[JobRecord]:
        """Every job, by name."""
        with self._read.begin() as session:
            rows = session.scalars(sa.select(JobRow).order_by(JobRow.name))
            return [row.to_record() for row in rows]

    def set_parallelism(
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

    def register_states(self, job: str, operator: str, states: Sequence[StateRecord]) -> None:
        """Insert or update (by name) the states of ``operator`` in ``job``."""
        check_states(job, operator, states)
        with self._write.begin() as session:
            upsert_states(session, load_job(session, job, lock=True), operator, states)

    def list_states(self, job: str, operator: str | None = None) -> list[StateRecord]:
        """The registered states of ``job`` (of one operator if given), by operator and name."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            query = sa.select(StateRow).where(StateRow.job_id == job_row.id)
            if operator is not None:
                query = query.where(StateRow.operator == operator)
            rows = session.scalars(query.order_by(StateRow.operator, StateRow.name))
            return [row.to_record(job) for row in rows]


def upsert_states(
    session: Session, job_row: JobRow, operator: str, states: Sequence[StateRecord]
) -> None:
    """Insert or update (by name) the states of ``operator`` in the job of ``job_row``, in
    ``session`` (the caller's transaction: a checkpoint's completion registers its states)."""
    existing = {
        row.name: row
        for row in session.scalars(
            sa.select(StateRow).where(StateRow.job_id == job_row.id, StateRow.operator == operator)
        )
    }
    registered_at = now()
    for state in states:
        row = existing.get(state.name)
        if row is None:
            row = StateRow(job_id=job_row.id, operator=operator, name=state.name)
            session.add(row)
        row.kind = state.kind
        row.descriptor = dict(state.descriptor)
        row.schema = state.schema
        row.ttl = None if state.ttl is None else dict(state.ttl)
        row.registered_at = registered_at
