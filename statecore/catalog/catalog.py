"""The checkpoint catalog: jobs, their registered states, checkpoints, savepoints and leases.

:class:`Catalog` is the facade over the catalog's stores, one per concept and all over one
engine: :class:`~statecore.catalog.jobs.JobStore`,
:class:`~statecore.catalog.checkpoints.CheckpointStore`,
:class:`~statecore.catalog.savepoints.SavepointStore`,
:class:`~statecore.catalog.leases.LeaseStore`, :class:`~statecore.catalog.live.LiveStore` and
:class:`~statecore.catalog.outputs.OutputStore` and
:class:`~statecore.catalog.skips.SkipStore` (also reachable as :attr:`Catalog.jobs`,
:attr:`Catalog.checkpoints`, ...).

A checkpoint is *complete* when :meth:`Catalog.complete_checkpoint` has committed, in one
database transaction, the Delta version of every table it restores from. Every write locks the
job's row first (``SELECT ... FOR UPDATE`` on Postgres, ``BEGIN IMMEDIATE`` on SQLite), so
concurrent writers of one job are serialized.

>>> with Catalog.connect("sqlite://") as catalog:
...     _ = catalog.ensure_job("clicks", parallelism=2, max_parallelism=128)
...     _ = catalog.begin_checkpoint("clicks", 1, kind=CheckpointKind.CHECKPOINT,
...                                  parallelism=2, max_parallelism=128)
...     done = catalog.complete_checkpoint("clicks", 1, tables=[])
...     catalog.latest_restorable("clicks") == done
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any

import sqlalchemy as sa

from statecore.catalog.checkpoints import RESTORABLE_KINDS, CheckpointStore
from statecore.catalog.engine import catalog_location, discard_engine, redacted, shared_engine
from statecore.catalog.jobs import JobStore
from statecore.catalog.leases import RUN_OPERATION, LeaseStore
from statecore.catalog.live import LiveStore
from statecore.catalog.migrations import migrate
from statecore.catalog.outputs import OutputStore
from statecore.catalog.records import (
    CheckpointKind,
    CheckpointRecord,
    CheckpointStatus,
    JobRecord,
    LiveEndpoint,
    MaintenanceLock,
    OutputOwner,
    PendingOutput,
    SavepointRecord,
    SkippedCheckpoint,
    StateRecord,
    TableVersion,
)
from statecore.catalog.savepoints import SavepointStore
from statecore.catalog.skips import SkipStore
from statecore.catalog.store import Sessions
from statecore.config import DEFAULT_LEASE_TIMEOUT
from statecore.errors import CatalogError, ConfigError

__all__ = ["RUN_OPERATION", "Catalog"]


class Catalog:
    """The checkpoint catalog in a SQLAlchemy database; open it with :meth:`connect`."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        sessions = Sessions.of(engine)
        self.jobs = JobStore(sessions)
        self.checkpoints = CheckpointStore(sessions)
        self.savepoints = SavepointStore(sessions)
        self.leases = LeaseStore(sessions)
        self.live = LiveStore(sessions)
        self.outputs = OutputStore(sessions)
        self.skips = SkipStore(sessions)

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

    # jobs and their states

    def ensure_job(self, job: str, *, parallelism: int, max_parallelism: int) -> JobRecord:
        """Register ``job`` if it is new; an existing job is returned unchanged."""
        return self.jobs.ensure(job, parallelism=parallelism, max_parallelism=max_parallelism)

    def get_job(self, job: str) -> JobRecord:
        """The job named ``job``; :class:`JobNotFoundError` if the catalog does not know it."""
        return self.jobs.get(job)

    def find_job(self, job: str) -> JobRecord | None:
        """The job named ``job``, or ``None`` if the catalog does not know it (one row)."""
        return self.jobs.find(job)

    def has_job(self, job: str) -> bool:
        """Whether the catalog knows ``job`` (one row)."""
        return self.jobs.exists(job)

    def list_jobs(self) -> list[JobRecord]:
        """Every job, by name."""
        return self.jobs.every()

    def set_job_parallelism(
        self, job: str, *, parallelism: int, max_parallelism: int | None = None
    ) -> JobRecord:
        """Record a rescale of ``job``; its max parallelism stays unless given."""
        return self.jobs.set_parallelism(
            job, parallelism=parallelism, max_parallelism=max_parallelism
        )

    def register_states(self, job: str, operator: str, states: Sequence[StateRecord]) -> None:
        """Insert or update (by name) the states of ``operator`` in ``job``."""
        self.jobs.register_states(job, operator, states)

    def list_states(self, job: str, operator: str | None = None) -> list[StateRecord]:
        """The registered states of ``job`` (of one operator if given), by operator and name."""
        return self.jobs.list_states(job, operator)

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
        FAILED starts again (a retry). With ``increasing``, an id below
        :meth:`highest_completed_id` is refused (:class:`CheckpointOrderError`). With
        ``epoch``, the lease of that epoch must hold the job (:class:`ConcurrentRunError`), and
        the checkpoint records it.
        """
        return self.checkpoints.begin(
            job,
            checkpoint_id,
            kind=kind,
            parallelism=parallelism,
            max_parallelism=max_parallelism,
            restored_from=restored_from,
            epoch=epoch,
            input_identity=input_identity,
            increasing=increasing,
        )

    def complete_checkpoint(
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
        """Record ``tables`` (the run's ``metrics``, JSON, and its event-time ``watermark``, epoch
        ms) and complete the checkpoint, in one transaction; with ``states`` (an operator and its
        states, as :meth:`register_states` takes them) the states are registered in the same
        transaction, so the catalog's schemas never get ahead of the tables.

        :class:`CheckpointCommitError` if the checkpoint is not IN_PROGRESS or the commit fails,
        :class:`ConcurrentRunError` if ``epoch`` is given and its lease no longer holds the job
        (checked under the job's row lock, in the same transaction); then nothing of it changed.
        """
        return self.checkpoints.complete(
            job,
            checkpoint_id,
            tables=tables,
            epoch=epoch,
            metrics=metrics,
            watermark=watermark,
            states=states,
        )

    def fail_checkpoint(
        self, job: str, checkpoint_id: int, *, error: str, epoch: int | None = None
    ) -> CheckpointRecord:
        """Mark the checkpoint FAILED with ``error``; a COMPLETED (or EXPIRED) one is never
        failed: :meth:`begin_checkpoint` replays both. With ``epoch``, a checkpoint that another
        writer's epoch began again is left alone."""
        return self.checkpoints.fail(job, checkpoint_id, error=error, epoch=epoch)

    def get_checkpoint(
        self, job: str, checkpoint_id: int, *, with_sizes: bool = True
    ) -> CheckpointRecord:
        """Checkpoint ``checkpoint_id`` of ``job``; :class:`CheckpointNotFoundError` if none.
        Its table versions' ``key_groups`` are empty unless ``with_sizes`` (for callers that
        need only the versions)."""
        return self.checkpoints.get(job, checkpoint_id, with_sizes=with_sizes)

    def checkpoint_status(self, job: str, checkpoint_id: int) -> CheckpointStatus | None:
        """The status of checkpoint ``checkpoint_id`` of ``job``, or ``None`` if the catalog
        knows no such checkpoint or job (one row, no tables)."""
        return self.checkpoints.status(job, checkpoint_id)

    def latest_restorable(
        self, job: str, *, kinds: Iterable[CheckpointKind] = RESTORABLE_KINDS
    ) -> CheckpointRecord | None:
        """The checkpoint of one of ``kinds`` that completed last (in completion order), or
        ``None``: what a run or an operation restores from."""
        return self.checkpoints.latest_restorable(job, kinds=kinds)

    def latest_checkpoint(
        self, job: str, *, kinds: Iterable[CheckpointKind] = RESTORABLE_KINDS
    ) -> CheckpointRecord | None:
        """:meth:`latest_restorable` (the name its callers used first)."""
        return self.checkpoints.latest_restorable(job, kinds=kinds)

    def latest_completed_id(self, job: str) -> int | None:
        """The id of the checkpoint of any kind that completed last, or ``None``: the one
        retention never expires."""
        return self.checkpoints.latest_completed_id(job)

    def highest_completed_id(self, job: str) -> int | None:
        """The largest id of a completed (or expired) CHECKPOINT of ``job``: a new run's id
        must not be below it."""
        return self.checkpoints.highest_completed_id(job)

    def latest_checkpoint_id(self, job: str) -> int | None:
        """:meth:`highest_completed_id` (the name its callers used first)."""
        return self.checkpoints.highest_completed_id(job)

    def skip_checkpoint(self, job: str, checkpoint_id: int, *, reason: str) -> SkippedCheckpoint:
        """Record that ``job``'s runs go past ``checkpoint_id`` on purpose, for ``reason``
        (:class:`~statecore.catalog.skips.SkipStore`): the next run does not refuse the gap."""
        return self.skips.skip(job, checkpoint_id, reason=reason)

    def skipped_checkpoints(
        self, job: str, *, above: int | None = None, below: int | None = None
    ) -> list[SkippedCheckpoint]:
        """``job``'s skipped checkpoints by id, those strictly between ``above`` and ``below``
        when given."""
        return self.skips.list(job, above=above, below=below)

    def highest_checkpoint_id(self, job: str) -> int | None:
        """The largest checkpoint id of ``job``, of any kind and status, or ``None``."""
        return self.checkpoints.highest_id(job)

    def list_checkpoints(
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
        given), by checkpoint id: only the ``last`` ones (largest ids) if given; without their
        table versions (``tables`` empty, one query less) unless ``with_tables``; the table
        versions' ``key_groups`` empty unless ``with_sizes`` (retention and VACUUM need only
        the versions)."""
        return self.checkpoints.every(
            job,
            status=status,
            with_tables=with_tables,
            with_sizes=with_sizes,
            last=last,
            after=after,
        )

    def delete_checkpoint(self, job: str, checkpoint_id: int) -> None:
        """Forget checkpoint ``checkpoint_id`` of ``job`` and its table versions."""
        self.checkpoints.delete(job, checkpoint_id)

    def expire_checkpoints(self, job: str, checkpoint_ids: Iterable[int]) -> list[CheckpointRecord]:
        """Mark completed checkpoints EXPIRED and forget their table versions, in one transaction.

        The rows stay (re-running an expired checkpoint id is still a replay); the latest
        completed checkpoint (:meth:`latest_completed_id`) is never expired.
        """
        return self.checkpoints.expire(job, checkpoint_ids)

    # output tables: their writer, and checkpoints' pending output commits

    def bind_outputs(
        self, tables: Sequence[tuple[str, str]], *, job: str, operator: str
    ) -> list[OutputOwner]:
        """Bind the output and late-data tables ``tables`` (``(uri, kind)``) to ``job`` and
        ``operator`` at their first run, all or none: :class:`OutputOwnedError` when another
        writer has one of them."""
        return self.outputs.bind(tables, job=job, operator=operator)

    def output_owner(self, uri: str) -> OutputOwner | None:
        """The writer the table at ``uri`` is bound to, or ``None``."""
        return self.outputs.owner(uri)

    def record_pending_outputs(
        self,
        job: str,
        checkpoint_id: int,
        outputs: Sequence[PendingOutput],
        *,
        epoch: int | None = None,
    ) -> None:
        """Record the IN_PROGRESS checkpoint's output files as its pending output commits,
        fenced by ``epoch`` (:class:`ConcurrentRunError` when its lease is lost)."""
        self.outputs.record(job, checkpoint_id, outputs, epoch=epoch)

    def pending_outputs(
        self, job: str, checkpoint_id: int | None = None
    ) -> list[tuple[PendingOutput, CheckpointStatus]]:
        """The output commits of ``job`` not yet in their tables, with their checkpoint's
        status, by checkpoint id (of ``checkpoint_id`` alone if given)."""
        return self.outputs.pending(job, checkpoint_id)

    def mark_output_committed(self, job: str, checkpoint_id: int, uri: str) -> None:
        """The pending output commit of ``checkpoint_id`` to ``uri`` is in its table."""
        self.outputs.mark_committed(job, checkpoint_id, uri)

    def note_output_error(self, job: str, checkpoint_id: int, uri: str, error: str) -> None:
        """Why the last attempt to commit the pending output of ``checkpoint_id`` to ``uri``
        failed (shown by ``statecore checkpoints list|show`` while it is pending)."""
        self.outputs.note_error(job, checkpoint_id, uri, error)

    def discard_pending_outputs(self, job: str, checkpoint_id: int) -> list[PendingOutput]:
        """Forget the pending output commits of a checkpoint that did not complete; those
        forgotten (their files are the caller's to delete)."""
        return self.outputs.discard(job, checkpoint_id)

    # savepoints

    def add_savepoint(self, savepoint: SavepointRecord) -> SavepointRecord:
        """Record a savepoint that was written completely; its name is unique per job."""
        return self.savepoints.add(savepoint)

    def list_savepoints(self, job: str | None = None) -> list[SavepointRecord]:
        """The savepoints of ``job`` (of every job when ``None``), oldest first."""
        return self.savepoints.every(job)

    def get_savepoint(self, job: str, name: str) -> SavepointRecord:
        """Savepoint ``name`` of ``job``; :class:`CheckpointNotFoundError` if none."""
        return self.savepoints.get(job, name)

    def delete_savepoint(self, job: str, name: str) -> SavepointRecord:
        """Forget savepoint ``name`` of ``job``: a pin no longer keeps its table versions from
        retention and VACUUM; an export's folder is left as it is. The record it was."""
        return self.savepoints.delete(job, name)

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
        """Hold ``job`` for ``operation``: :meth:`LeaseStore.acquire
        <statecore.catalog.leases.LeaseStore.acquire>` (a new fencing epoch; who may take
        over a held lease)."""
        return self.leases.acquire(
            job, operation=operation, owner=owner, timeout=timeout, stale_after=stale_after
        )

    def renew_lease(self, job: str, *, epoch: int, timeout: timedelta) -> MaintenanceLock | None:
        """Extend the lease of ``epoch`` to ``timeout`` from now; ``None`` if it was lost."""
        return self.leases.renew(job, epoch=epoch, timeout=timeout)

    def check_lease(self, job: str, *, epoch: int) -> None:
        """:class:`ConcurrentRunError` unless the lease of ``epoch`` still holds ``job``."""
        self.leases.check(job, epoch=epoch)

    def raise_lease_epoch(self, job: str, *, at_least: int) -> int:
        """Make the job's next lease take an epoch above ``at_least`` (:meth:`LeaseStore.raise_epoch
        <statecore.catalog.leases.LeaseStore.raise_epoch>`)."""
        return self.leases.raise_epoch(job, at_least=at_least)

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
        return self.leases.acquire(
            job, operation=operation, owner=owner, timeout=timeout, stale_after=stale_after
        )

    def release_maintenance_lock(
        self, job: str, *, owner: str | None = None
    ) -> MaintenanceLock | None:
        """Release the job's lease (only if ``owner`` holds it, when given). A writer whose
        lease was released fails at its next commit."""
        return self.leases.release(job, owner=owner)

    def maintenance_lock(self, job: str) -> MaintenanceLock | None:
        """The lease holding ``job`` (a run or a maintenance operation), or ``None``."""
        return self.leases.holder(job)

    # live lookups

    def live_token(self, job: str, *, create: bool = False) -> str | None:
        """The job's token for its tasks' live endpoints (made once with ``create``)."""
        return self.live.token(job, create=create)

    def set_live_endpoints(
        self, job: str, operator: str, endpoints: Sequence[LiveEndpoint]
    ) -> None:
        """Replace where ``operator``'s tasks serve live lookups (none: its run served none)."""
        self.live.set_endpoints(job, operator, endpoints)

    def live_endpoints(self, job: str) -> list[LiveEndpoint]:
        """Where the tasks of ``job``'s latest live run serve its state."""
        return self.live.endpoints(job)
