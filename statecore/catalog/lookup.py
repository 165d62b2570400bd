"""Loading the rows of jobs and checkpoints, with not-found errors that say what exists."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from statecore.catalog.models import WITH_SIZES, CheckpointRow, JobRow
from statecore.errors import CheckpointNotFoundError, JobNotFoundError

__all__ = ["find_checkpoint", "load_checkpoint", "load_job"]

_SHOWN = 20  # names listed in a not-found message


def load_job(session: Session, job: str, *, lock: bool = False) -> JobRow:
    """The job's row, locked for the transaction if ``lock``; JobNotFoundError if none."""
    query = sa.select(JobRow).where(JobRow.name == job)
    row = session.scalar(query.with_for_update() if lock else query)
    if row is None:
        names = list(
            session.scalars(sa.select(JobRow.name).order_by(JobRow.name).limit(_SHOWN + 1))
        )
        raise JobNotFoundError(
            f"job {job!r} is not in the checkpoint catalog; {_known('jobs', names)}"
        )
    return row


def find_checkpoint(
    session: Session, job_row: JobRow, checkpoint_id: int, *, sizes: bool = False
) -> CheckpointRow | None:
    """The checkpoint's row (its tables' key-group sizes loaded with it if ``sizes``), or
    ``None``."""
    query = sa.select(CheckpointRow).where(
        CheckpointRow.job_id == job_row.id, CheckpointRow.checkpoint_id == checkpoint_id
    )
    return session.scalar(query.options(WITH_SIZES) if sizes else query)


def load_checkpoint(
    session: Session, job_row: JobRow, checkpoint_id: int, *, sizes: bool = False
) -> CheckpointRow:
    """The checkpoint's row (:func:`find_checkpoint`); CheckpointNotFoundError if none."""
    row = find_checkpoint(session, job_row, checkpoint_id, sizes=sizes)
    if row is None:
        latest = session.scalars(
            sa.select(CheckpointRow.checkpoint_id)
            .where(CheckpointRow.job_id == job_row.id)
            .order_by(CheckpointRow.checkpoint_id.desc())
            .limit(_SHOWN + 1)
        )
        ids = [str(i) for i in latest]
        raise CheckpointNotFoundError(
            f"checkpoint {checkpoint_id} of job {job_row.name!r} is not in the checkpoint "
            f"catalog; {_known('checkpoints', ids[_SHOWN::-1], latest=True)}"
        )
    return row


def _known(what: str, names: list[str], *, latest: bool = False) -> str:
    """``names`` holds up to _SHOWN + 1 names; the extra one only says that there are more."""
    if not names:
        return f"it has no {what}"
    if len(names) <= _SHOWN:
        return f"known {what}: {', '.join(names)}"
    if latest:
        return f"latest {_SHOWN} {what}: {', '.join(names[1:])}"
    return f"known {what}: {', '.join(names[:_SHOWN])}, ..."
