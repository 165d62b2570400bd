"""Driver side of a checkpoint: plan the restore, commit every table, complete it in the catalog.

A checkpoint is complete only when its catalog row is committed, naming the Delta version of every
table: keyed states, operator states and the timers. States the run did not touch keep the
version of the checkpoint it restored from. Everything a checkpoint commits (the state tables,
the output and late-data tables, any sink) is a commit participant: the coordinator alone owns
the order of their commits and the failure policy (:mod:`statecore.checkpoint.participants`).
Before anything runs, the states a function registers are checked against the stored schemas
(:mod:`statecore.compatibility`).

A coordinator given the job's lease (:class:`~statecore.checkpoint.lock.JobLease`) fences every
commit with its epoch: each Delta commit carries it and checks the table and the catalog first,
and the catalog completes the checkpoint only while the lease is held. Holding the lease, it
also resolves what a dead writer left: an IN_PROGRESS checkpoint is rolled back (every table to
the latest completed checkpoint's version) and marked FAILED, and the pending output commits of
completed checkpoints are rolled forward.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from statecore.catalog import (
    Catalog,
    CheckpointKind,
    CheckpointRecord,
    CheckpointStatus,
)
from statecore.checkpoint.lock import JobLease
from statecore.checkpoint.output_records import delete_pending_records, write_pending_record
from statecore.checkpoint.outputs import OutputSink, roll_forward
from statecore.checkpoint.participants import CommitParticipant
from statecore.checkpoint.recover import check_catalog_not_behind
from statecore.checkpoint.state_tables import StateTables, table_partition
from statecore.config import StatecoreConfig, check_name
from statecore.errors import (
    ConcurrentRunError,
    MaxParallelismMismatchError,
)
from statecore.keygroups import check_parallelism
from statecore.runtime.task import RestoredState, RestorePlan, StateSchema, StateSnapshotResult
from statecore.snapshot import TIMERS, Fence, SnapshotTable, state_table_uri
from statecore.snapshot.changelog import CHANGES, changes_schema
from statecore.snapshot.faults import fault_point
from statecore.types import schema_from_text

__all__ = ["CheckpointCoordinator", "PlannedCheckpoint", "keyed_table_uri", "table_schema"]

log = logging.getLogger(__name__)


def keyed_table_uri(warehouse: str, job: str, operator: str, state: str) -> str:
    return state_table_uri(warehouse, job, operator, "keyed", state)


def table_schema(table_kind: str, state_schema: str) -> pa.Schema:
    """The row schema of a table of a state registered with ``state_schema``."""
    schema = schema_from_text(state_schema)
    return changes_schema(schema) if table_kind == CHANGES else schema


@dataclass(frozen=True)
class PlannedCheckpoint:
    checkpoint_id: int
    parallelism: int
    max_parallelism: int
    restore: RestorePlan
    base: CheckpointRecord | None
    replayed: bool  # already completed: the run is a no-op


class CheckpointCoordinator:
    """Coordinates checkpoints of one keyed operator of one job."""

    def __init__(
        self,
        config: StatecoreConfig,
        catalog: Catalog,
        *,
        job: str,
        operator: str,
        lease: JobLease | None = None,
    ):
        self.config = config
        self.catalog = catalog
        self.job = check_name("job", job)
        self.operator = check_name("operator", operator)
        self.lease = lease
        self.fence = None if lease is None else Fence(job, lease.epoch, lease.check)

    @property
    def epoch(self) -> int | None:
        return None if self.lease is None else self.lease.epoch

    def table_uri(self, state: str, table_kind: str = "keyed") -> str:
        return state_table_uri(self.config.warehouse, self.job, self.operator, table_kind, state)

    def plan(
        self,
        checkpoint_id: int,
        *,
        parallelism: int | None,
        max_parallelism: int | None,
        default_parallelism: int,
        input_identity: str | None = None,
    ) -> PlannedCheckpoint:
        """Resolve parallelism, check it against the last checkpoint, and begin the checkpoint
        (refused when its id is below the latest completed one, or when it replays a completed
        one with another ``input_identity``)."""
        from statecore.keygroups import compute_default_max_parallelism

        existing = self.catalog.find_job(self.job)
        base = self.catalog.latest_restorable(self.job) if existing else None
        check_catalog_not_behind(self.config, self.catalog, self.job, latest=base)
        p = parallelism or (existing.parallelism if existing else default_parallelism)
        stored_max = (
            base.max_parallelism if base else (existing.max_parallelism if existing else None)
        )
        max_p = max_parallelism or stored_max or compute_default_max_parallelism(p)
        if stored_max is not None and max_p != stored_max:
            raise MaxParallelismMismatchError(
                f"job {self.job!r}: checkpoint {base.checkpoint_id if base else '-'} was taken "
                f"with max parallelism {stored_max}, this run asks for {max_p}; key groups would "
                "not line up (rescale past the max parallelism rewrites the state into a savepoint)"
            )
        check_parallelism(p, max_p)
        if existing is None:  # an existing job is left as it is
            self.catalog.ensure_job(self.job, parallelism=p, max_parallelism=max_p)
        record = self.catalog.begin_checkpoint(
            self.job,
            checkpoint_id,
            kind=CheckpointKind.CHECKPOINT,
            parallelism=p,
            max_parallelism=max_p,
            restored_from=base.checkpoint_id if base else None,
            epoch=self.epoch,
            input_identity=input_identity,
            increasing=True,
        )
        fault_point("catalog:begin")
        replayed = record.status in (CheckpointStatus.COMPLETED, CheckpointStatus.EXPIRED)
        if replayed:
            log.info(
                "job %s: checkpoint %s is already complete; replay is a no-op",
                self.job,
                checkpoint_id,
            )
        return PlannedCheckpoint(checkpoint_id, p, max_p, self._restore_plan(base), base, replayed)

    def resolve_abandoned(self) -> list[CheckpointRecord]:
        """Roll back and fail every IN_PROGRESS checkpoint of the job: holding the lease, this
        writer is the only one, so they were left by writers that died or were taken over.
        Every table goes back to the latest completed checkpoint's version. Then the pending
        output commits are resolved (:func:`~statecore.checkpoint.outputs.roll_forward`):
        those of completed checkpoints committed, those of failed ones deleted
        (:class:`~statecore.errors.OutputCommitPendingError` when a commit fails: nothing
        builds on a checkpoint whose output is not in its tables yet)."""
        failed = self._fail_abandoned()
        rolled = roll_forward(self.catalog, self.job, self.fence, warehouse=self.config.warehouse)
        for pending in rolled:
            log.info(
                "job %s: the %s of checkpoint %s, pending since it completed, was committed to %s",
                self.job,
                pending.kind,
                pending.checkpoint_id,
                pending.uri,
            )
        return failed

    def _fail_abandoned(self) -> list[CheckpointRecord]:
        abandoned = self.catalog.list_checkpoints(self.job, status=CheckpointStatus.IN_PROGRESS)
        if not abandoned:
            return []
        base = self.catalog.latest_restorable(self.job)
        schemas = {(s.operator, s.name): s.schema for s in self.catalog.list_states(self.job)}
        for t in base.tables if base else ():
            schema = schemas.get((t.operator, t.state))
            if schema is None:
                continue
            table = SnapshotTable(
                t.path,
                table_schema(t.table_kind, schema),
                label=f"{self.job}/{t.operator}/{t.state}",
                partition=table_partition(t.table_kind),
            )
            if table.roll_back(t.version, fence=self.fence):
                log.info("job %s: %s rolled back to version %s", self.job, t.path, t.version)
        failed = []
        for checkpoint in abandoned:
            log.warning(
                "job %s: checkpoint %s was left IN_PROGRESS by a writer that is gone; rolled "
                "back and marked FAILED",
                self.job,
                checkpoint.checkpoint_id,
            )
            failed.append(
                self.catalog.fail_checkpoint(
                    self.job,
                    checkpoint.checkpoint_id,
                    error=(
                        "abandoned: its writer died or lost the job's lease; rolled back by "
                        f"the writer of epoch {self.epoch}"
                    ),
                )
            )
        return failed

    def _restore_plan(self, base: CheckpointRecord | None) -> RestorePlan:
        states = self.catalog.list_states(self.job, self.operator)
        registered = {s.name: (s.kind, s.schema) for s in states}
        if base is None:
            return RestorePlan(self.job, self.operator, registered=registered)
        schemas = {s.name: s.schema for s in states}
        restored: dict[str, dict[str, RestoredState]] = defaultdict(dict)
        for t in base.tables:
            if t.operator != self.operator:
                continue
            table = SnapshotTable(
                t.path,
                table_schema(t.table_kind, schemas[t.state]),
                label=f"{self.job}/{self.operator}/{t.state}",
                partition=table_partition(t.table_kind),
            )
            restored[t.table_kind][t.state] = RestoredState(
                t.path, schemas[t.state], tuple(table.files(t.version))
            )
        return RestorePlan(
            self.job,
            self.operator,
            base.checkpoint_id,
            states=restored["keyed"],
            parallelism=base.parallelism,
            operator_states=restored["operator"],
            timers=restored[TIMERS].get(TIMERS),
            changes=restored[CHANGES],
            registered=registered,
        )

    def check_compatible(
        self, planned: PlannedCheckpoint, registered: Sequence[StateSchema]
    ) -> PlannedCheckpoint:
        """The plan with the keyed states of ``registered`` whose rows migrate marked for a full
        rewrite; a :class:`StateMigrationError` when one cannot restore from its stored schema.
        The tasks check the same as their function registers each state (before any record is
        processed); the driver checks again, at the commit, what they report."""
        migrated = planned.restore.migrated_states(registered)
        for name in sorted(migrated):
            log.info("job %s, state %s: migrated on restore", self.job, name)
        return replace(planned, restore=replace(planned.restore, migrated=migrated))

    def commit(
        self,
        planned: PlannedCheckpoint,
        results: Iterable[StateSnapshotResult],
        *,
        metrics: Mapping[str, Any] | None = None,
        watermark: int | None = None,
        outputs: Sequence[OutputSink] = (),
    ) -> CheckpointRecord:
        """Commit the checkpoint and complete it (with the run's ``metrics`` and its
        event-time ``watermark``, epoch ms), then commit its ``outputs``: every output sink and
        the state tables (of ``results``) checked; the output files recorded as the
        checkpoint's pending output commits; the state tables committed
        (:mod:`statecore.checkpoint.participants`); the checkpoint completed, its states
        registered in the same catalog transaction; and only then the output tables committed
        (:mod:`statecore.checkpoint.outputs`). On an error before the completion the state
        tables are rolled back, the output files deleted (never committed), the checkpoint
        fails and the error propagates; after it, the checkpoint stays complete and
        :class:`~statecore.errors.OutputCommitPendingError` says its output is pending."""
        checkpoint_id = planned.checkpoint_id
        states = StateTables(
            self.config,
            job=self.job,
            operator=self.operator,
            results=results,
            base=planned.base.tables if planned.base else (),
            migrated=planned.restore.migrated,
            parallelism=planned.parallelism,
            max_parallelism=planned.max_parallelism,
            watermark=watermark,
        )
        asked: list[CommitParticipant] = []
        try:
            for sink in outputs:
                sink.check()
            states.check()
            pending = [sink.pending(self.job, checkpoint_id) for sink in outputs]
            self.catalog.record_pending_outputs(self.job, checkpoint_id, pending, epoch=self.epoch)
            # and in the warehouse, for a catalog rebuilt from it (statecore catalog recover)
            write_pending_record(
                self.config.warehouse, self.job, checkpoint_id, pending, epoch=self.epoch
            )
            fault_point("catalog:pending")
            asked.append(states)  # it may fail after its commit: rolled back too
            if not states.commit(checkpoint_id, self.fence):
                log.warning(
                    "job %s: the %s of checkpoint %s was committed by an earlier attempt; "
                    "this attempt's files were dropped",
                    self.job,
                    states.name,
                    checkpoint_id,
                )
            fault_point("catalog:states")
            fault_point("catalog:complete:before")
            record = self.catalog.complete_checkpoint(
                self.job,
                checkpoint_id,
                tables=states.tables,
                epoch=self.epoch,
                metrics=metrics,
                watermark=watermark,
                states=(self.operator, states.states),
            )
        except BaseException as exc:
            self.abort(checkpoint_id, exc, asked, outputs)
            raise
        fault_point("catalog:complete:after")
        roll_forward(
            self.catalog,
            self.job,
            self.fence,
            checkpoint_id=checkpoint_id,
            warehouse=self.config.warehouse,
        )
        return record

    def abort(
        self,
        checkpoint_id: int,
        exc: BaseException,
        participants: Sequence[CommitParticipant] = (),
        outputs: Sequence[OutputSink] = (),
    ) -> None:
        """The failure policy of a checkpoint that did not complete: roll ``participants``
        back (not on :class:`ConcurrentRunError`: the writer that holds the job now resolves
        it), delete the files of ``outputs`` and forget the checkpoint's pending output
        commits, then mark the checkpoint FAILED. Never raises: the caller re-raises ``exc``,
        which carries a note of any error of the rollback or of the catalog (logged too)."""
        if participants and not isinstance(exc, ConcurrentRunError):
            try:
                completed = self.catalog.highest_completed_id(self.job)
            except Exception as error:  # the next run rolls them back first
                _attach(exc, f"job {self.job}: no rollback (the catalog failed: {error!r})")
            else:
                for participant in reversed(participants):
                    try:
                        participant.roll_back(completed, self.fence)
                    except Exception as error:  # the next run rolls it back first
                        _attach(
                            exc,
                            f"job {self.job}: rollback of the {participant.name} failed: {error!r}",
                        )
        if outputs:
            self.discard_outputs(checkpoint_id, exc, outputs)
        self.fail(checkpoint_id, exc)

    def discard_outputs(
        self, checkpoint_id: int, exc: BaseException, outputs: Sequence[OutputSink]
    ) -> None:
        """Delete the output files of a checkpoint that did not complete, and its pending
        output commits (those of this writer: under another's epoch the checkpoint is that
        writer's now). Left as they are when the catalog cannot tell that it did not complete
        (the next holder resolves them). Never raises (``exc`` gets a note)."""
        try:
            status = self.catalog.checkpoint_status(self.job, checkpoint_id)
            if status in (CheckpointStatus.COMPLETED, CheckpointStatus.EXPIRED):
                return  # its completion committed after all: its output is rolled forward
            mine = not isinstance(exc, ConcurrentRunError)
            if mine:
                self.catalog.discard_pending_outputs(self.job, checkpoint_id)
            for sink in outputs:
                sink.discard()
            if mine:  # after the files: the staging folder goes with the record
                delete_pending_records(self.config.warehouse, self.job, checkpoint_id)
        except Exception as error:  # the next holder deletes what the catalog recorded
            _attach(
                exc,
                f"job {self.job}: the output files of checkpoint {checkpoint_id} were not "
                f"deleted: {error!r}",
            )

    def fail(self, checkpoint_id: int, exc: BaseException) -> None:
        """Mark the checkpoint FAILED (unless a newer writer began it again). Never raises:
        when the catalog fails, ``exc`` (the error that failed the checkpoint, which the
        caller re-raises) gets a note of it, and it is logged; the checkpoint then stays
        IN_PROGRESS and the job's next writer fails it."""
        try:
            self.catalog.fail_checkpoint(
                self.job, checkpoint_id, error=f"{type(exc).__name__}: {exc}", epoch=self.epoch
            )
        except Exception as error:
            _attach(
                exc,
                f"job {self.job}: checkpoint {checkpoint_id} could not be marked FAILED: {error!r}",
            )


def _attach(exc: BaseException, note: str) -> None:
    """Log ``note`` and add it to ``exc``, the error that propagates."""
    log.error("%s (while failing on %s: %s)", note, type(exc).__name__, exc)
    exc.add_note(note)
