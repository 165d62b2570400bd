"""The checkpoints of each job: begun, completed, failed, expired; and which one is "latest".

"Latest" has three meanings, each its own lookup, and each reads a bounded number of rows
however long the job's history:

- :meth:`CheckpointStore.latest_restorable`: the checkpoint that *completed last* (by completion
  order) among the kinds a run restores from; what a run or an operation builds on.
- :meth:`CheckpointStore.latest_completed_id`: the id of the checkpoint of any kind that completed
  last; retention never expires it.
- :meth:`CheckpointStore.highest_completed_id`: the *largest id* of a CHECKPOINT that completed
  (even if expired since); a new run's id must not be below it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, noload

from statecore.catalog.jobs import upsert_states
from statecore.catalog.leases import check_epoch, load_in_progress
from statecore.catalog.lookup import find_checkpoint, load_checkpoint, load_job
from statecore.catalog.models import (
    WITH_SIZES,
    CheckpointRow,
    CheckpointTableRow,
    JobRow,
    PendingOutputRow,
)
from statecore.catalog.records import (
    CheckpointKind,
    CheckpointRecord,
    CheckpointStatus,
    StateRecord,
    TableVersion,
)
from statecore.catalog.store import Store, now
from statecore.catalog.validation import (
    check_checkpoint_id,
    check_parallelism,
    check_states,
    check_tables,
)
from statecore.errors import (
    CheckpointCommitError,
    CheckpointOrderError,
    ConfigError,
    ReplayMismatchError,
)

__all__ = ["RESTORABLE_KINDS", "CheckpointStore"]

RESTORABLE_KINDS = (CheckpointKind.CHECKPOINT, CheckpointKind.MAINTENANCE)
"""The kinds of checkpoint a run restores from."""

_IN_PROGRESS = CheckpointStatus.IN_PROGRESS.name
_COMPLETED = CheckpointStatus.COMPLETED.name
_EXPIRED = CheckpointStatus.EXPIRED.name
_DONE = (_COMPLETED, _EXPIRED)  # replayed, never begun again nor failed


class CheckpointStore(Store):
    """Checkpoints by job and id; every lookup reads one row (and its tables, if a record)."""

    def begin(
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
        """Start checkpoint ``checkpoint_id`` of ``job`` (:meth:`Catalog.begin_checkpoint`)."""
        check_checkpoint_id(job, checkpoint_id)
        check_parallelism(job, parallelism, max_parallelism)
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            if epoch is not None:
                check_epoch(session, job_row, epoch)
            row = find_checkpoint(session, job_row, checkpoint_id)
            if row is not None and row.status in _DONE:
                _check_replay(row, job, input_identity)
                return row.to_record(job)
            if increasing:
                latest = highest_completed_checkpoint_id(session, job_row.id)
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
            row.started_at = now()
            row.completed_at = None
            row.completion_seq = None
            row.restored_from = restored_from
            row.error = None
            row.epoch = epoch
            row.input_identity = input_identity
            return row.to_record(job)

    def complete(
        self,
        job: str,
        checkpoint_id: int,
        *,
        tables: Sequence[TableVersion],
        epoch: int | None = None,
        metrics: Mapping[str, Any] | None = None,
        watermark: int | None = None,
        states: tuple[str, Sequence[StateRecord]] | None = None,
    ) -> CheckpointRecord:
        """Record ``tables`` and complete the checkpoint (:meth:`Catalog.complete_checkpoint`)."""
        where = f"checkpoint {checkpoint_id} of job {job!r}"
        check_tables(where, tables)
        if states is not None:
            check_states(job, *states)
        try:
            with self._write.begin() as session:
                job_row, row = load_in_progress(
                    session,
                    job,
                    checkpoint_id,
                    epoch=epoch,
                    act="complete it",
                    refused="it cannot complete (begin it again to retry)",
                )
                if states is not None:  # the catalog's schemas move with the tables, or not at all
                    upsert_states(session, job_row, *states)
                job_row.last_completion_seq += 1
                row.tables = [CheckpointTableRow.from_record(table) for table in tables]
                row.status = _COMPLETED
                row.completed_at = now()
                row.completion_seq = job_row.last_completion_seq
                row.error = None
                row.metrics = dict(metrics) if metrics else None
                row.watermark = watermark
                session.flush()
                record = row.to_record(job, with_sizes=False)
        except sa.exc.SQLAlchemyError as exc:
            raise CheckpointCommitError(f"{where}: the catalog commit failed: {exc}") from exc
        return dataclasses.replace(record, tables=tuple(tables))  # their sizes, not decoded again

    def fail(
        self, job: str, checkpoint_id: int, *, error: str, epoch: int | None = None
    ) -> CheckpointRecord:
        """Mark the checkpoint FAILED (:meth:`Catalog.fail_checkpoint`)."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            row = load_checkpoint(session, job_row, checkpoint_id)
            if epoch is not None and row.epoch is not None and row.epoch != epoch:
                return row.to_record(job)
            if row.status in _DONE:
                raise CheckpointCommitError(
                    f"checkpoint {checkpoint_id} of job {job!r} is {row.status} and cannot fail "
                    f"({error})"
                )
            row.status = CheckpointStatus.FAILED.name
            row.error = error
            return row.to_record(job)

    def get(self, job: str, checkpoint_id: int, *, with_sizes: bool = True) -> CheckpointRecord:
        """Checkpoint ``checkpoint_id`` of ``job``; :class:`CheckpointNotFoundError` if none."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            row = load_checkpoint(session, job_row, checkpoint_id, sizes=with_sizes)
            return row.to_record(job, with_sizes=with_sizes)

    def status(self, job: str, checkpoint_id: int) -> CheckpointStatus | None:
        """The status of checkpoint ``checkpoint_id`` of ``job``; ``None`` if the catalog knows
        no such checkpoint (or no such job). One row, no tables."""
        with self._read.begin() as session:
            status = session.scalar(
                sa.select(CheckpointRow.status)
                .join(JobRow, CheckpointRow.job_id == JobRow.id)
                .where(JobRow.name == job, CheckpointRow.checkpoint_id == checkpoint_id)
            )
            return None if status is None else CheckpointStatus[status]

    def latest_restorable(
        self, job: str, *, kinds: Iterable[CheckpointKind] = RESTORABLE_KINDS
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
                .options(WITH_SIZES)
            )
            return None if row is None else row.to_record(job)

    def latest_completed_id(self, job: str) -> int | None:
        """The id of the checkpoint (of any kind) that completed last, or ``None``."""
        with self._read.begin() as session:
            return _latest_completed_id(session, load_job(session, job).id)

    def highest_completed_id(self, job: str) -> int | None:
        """The largest id of a CHECKPOINT of ``job`` that completed (or completed and expired
        since): a new run's id must not be below it."""
        with self._read.begin() as session:
            return highest_completed_checkpoint_id(session, load_job(session, job).id)

    def highest_id(self, job: str) -> int | None:
        """The largest checkpoint id of ``job`` of any kind and status, or ``None``."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            highest = session.scalar(
                sa.select(sa.func.max(CheckpointRow.checkpoint_id)).where(
                    CheckpointRow.job_id == job_row.id
                )
            )
            return None if highest is None else int(highest)

    def every(
        self,
        job: str,
        *,
        status: CheckpointStatus | None = None,
        with_tables: bool = True,
        with_sizes: bool = True,
        last: int | None = None,
        after: int | None = None,
    ) -> list[CheckpointRecord]:
        """The checkpoints of ``job`` (with ``status`` if given, with an id above ``after`` if
        given), by checkpoint id: only the ``last`` ones (the largest ids) if given; without
        their tables unless ``with_tables``, their tables without key-group sizes unless
        ``with_sizes``."""
        with self._read.begin() as session:
            job_row = load_job(session, job)
            query = sa.select(CheckpointRow).where(CheckpointRow.job_id == job_row.id)
            if not with_tables:
                query = query.options(noload(CheckpointRow.tables))
            elif with_sizes:
                query = query.options(WITH_SIZES)
            if status is not None:
                query = query.where(CheckpointRow.status == status.name)
            if after is not None:
                query = query.where(CheckpointRow.checkpoint_id > after)
            if last is None:
                rows = list(session.scalars(query.order_by(CheckpointRow.checkpoint_id)))
            else:
                newest = query.order_by(CheckpointRow.checkpoint_id.desc()).limit(last)
                rows = list(session.scalars(newest))[::-1]
            return [row.to_record(job, with_sizes=with_sizes) for row in rows]

    def delete(self, job: str, checkpoint_id: int) -> None:
        """Forget checkpoint ``checkpoint_id`` of ``job`` and its table versions."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            session.delete(load_checkpoint(session, job_row, checkpoint_id))

    def expire(self, job: str, checkpoint_ids: Iterable[int]) -> list[CheckpointRecord]:
        """Mark completed checkpoints EXPIRED (:meth:`Catalog.expire_checkpoints`)."""
        with self._write.begin() as session:
            job_row = load_job(session, job, lock=True)
            latest = _latest_completed_id(session, job_row.id)
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
            if expired:  # their output commits are in their tables: the records go too
                session.execute(
                    sa.delete(PendingOutputRow).where(
                        PendingOutputRow.job_id == job_row.id,
                        PendingOutputRow.checkpoint_id.in_([r.checkpoint_id for r in expired]),
                        PendingOutputRow.committed_at.is_not(None),
                    )
                )
            session.flush()
            return [row.to_record(job) for row in expired]


def _latest_completed_id(session: Session, job_pk: int) -> int | None:
    return session.scalar(
        sa.select(CheckpointRow.checkpoint_id)
        .where(CheckpointRow.job_id == job_pk, CheckpointRow.status == _COMPLETED)
        .order_by(CheckpointRow.completion_seq.desc())
        .limit(1)
    )


def highest_completed_checkpoint_id(session: Session, job_pk: int) -> int | None:
    # One query per status, each the first row of the (job, kind, status, id) index read
    # backwards: a MAX over both statuses at once could read every expired row.
    found = [
        session.scalar(
            sa.select(CheckpointRow.checkpoint_id)
            .where(
                CheckpointRow.job_id == job_pk,
                CheckpointRow.kind == CheckpointKind.CHECKPOINT.name,
                CheckpointRow.status == status,
            )
            .order_by(CheckpointRow.checkpoint_id.desc())
            .limit(1)
        )
        for status in _DONE
    ]
    return max((int(i) for i in found if i is not None), default=None)


def _check_replay(row: CheckpointRow, job: str, input_identity: str | None) -> None:
    if input_identity is None or row.input_identity is None:
        return
    if input_identity != row.input_identity and not _same_micro_batch(
        row.input_identity, input_identity
    ):
        raise ReplayMismatchError(
            f"checkpoint {row.checkpoint_id} of job {job!r} is {row.status} with input "
            f"{row.input_identity}; this run replays it with input {input_identity}: a "
            "checkpoint id stands for one input (give new data a new checkpoint id)"
        )


def _same_micro_batch(recorded: str, given: str) -> bool:
    """A micro-batch recorded before streams recorded their offsets (``{"batch_id": n}``)
    replayed with them (``{"batch_id": n, "offsets": ...}``): the same micro-batch, as Spark
    replays a micro-batch over the offsets it logged for it."""
    old, new = _given_json(recorded), _given_json(given)
    return (
        isinstance(old, dict)
        and isinstance(new, dict)
        and set(old) == {"batch_id"}
        and set(new) == {"batch_id", "offsets"}
        and old["batch_id"] == new["batch_id"]
    )


def _given_json(identity: str) -> Any:
    """The JSON of a caller-given identity (``given:{...}``), else ``None``."""
    if not identity.startswith("given:{"):
        return None
    try:
        return json.loads(identity.removeprefix("given:"))
    except ValueError:
        return None
