"""Live lookups: a job's token for its tasks' endpoints, and where those tasks serve."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import sqlalchemy as sa

from statecore.catalog.lookup import load_job
from statecore.catalog.models import LiveEndpointRow
from statecore.catalog.records import LiveEndpoint
from statecore.catalog.store import Store, now

__all__ = ["LiveStore"]


class LiveStore(Store):
    """The live endpoints of each job's latest live run, by operator and subtask."""

    def token(self, job: str, *, create: bool = False) -> str | None:
        """The job's token for its tasks' live endpoints (made once with ``create``)."""
        with (self._write if create else self._read).begin() as session:
            row = load_job(session, job, lock=create)
            if row.live_token is None and create:
                row.live_token = secrets.token_urlsafe(32)
            return row.live_token

    def set_endpoints(self, job: str, operator: str, endpoints: Sequence[LiveEndpoint]) -> None:
        """Replace where ``operator``'s tasks serve live lookups (none: its run served none)."""
        with self._write.begin() as session:
            row = load_job(session, job, lock=True)
            session.execute(
                sa.delete(LiveEndpointRow).where(
                    LiveEndpointRow.job_id == row.id, LiveEndpointRow.operator == operator
                )
            )
            updated_at = now()
            session.add_all(
                LiveEndpointRow(
                    job_id=row.id,
                    operator=operator,
                    subtask=e.subtask,
                    key_group_start=e.key_group_start,
                    key_group_end=e.key_group_end,
                    address=e.address,
                    checkpoint_id=e.checkpoint_id,
                    updated_at=updated_at,
                )
                for e in endpoints
            )

    def endpoints(self, job: str) -> list[LiveEndpoint]:
        """Where the tasks of ``job``'s latest live run serve its state."""
        with self._read.begin() as session:
            row = load_job(session, job)
            rows = session.scalars(
                sa.select(LiveEndpointRow)
                .where(LiveEndpointRow.job_id == row.id)
                .order_by(LiveEndpointRow.operator, LiveEndpointRow.subtask)
            )
            return [r.to_record(job) for r in rows]
