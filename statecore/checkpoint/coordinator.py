"""Driver side of a checkpoint: plan the restore, commit every table, complete it in the catalog.

A checkpoint is complete only when its catalog row is committed, naming the Delta version of every
table: keyed states, operator states and the timers. States the run did not touch keep the
version of the checkpoint it restored from. Before anything runs, the states a function registers
are checked against the stored schemas (:mod:`statecore.compatibility`).

A coordinator given the job's lease (:class:`~statecore.checkpoint.lock.JobLease`) fences every
commit with its epoch: each Delta commit carries it and checks the table and the catalog first,
and the catalog completes the checkpoint only while the lease is held. Holding the lease, it
also resolves what a dead writer left: an IN_PROGRESS checkpoint is rolled back (every table to
the latest completed checkpoint's version) and marked FAILED.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from statecore.catalog import (
    Catalog,
    CheckpointKind,
    CheckpointRecord,
    CheckpointStatus,
    StateRecord,
    TableVersion,
)
from statecore.checkpoint.lock import JobLease
from statecore.checkpoint.recover import check_catalog_not_behind
from statecore.compatibility import check_schema
from statecore.config import StatecoreConfig, check_name
from statecore.errors import (
    ConcurrentRunError,
    MaxParallelismMismatchError,
    StateError,
    StateMigrationError,
)
from statecore.keygroups import check_parallelism
from statecore.runtime.task import RestoredState, RestorePlan, StateSchema, StateSnapshotResult
from statecore.snapshot import TIMERS, Fence, SnapshotTable, state_table_uri
from statecore.snapshot.commits import CommitMetadata
from statecore.snapshot.faults import fault_point
from statecore.types import schema_from_text

__all__ = ["CheckpointCoordinator", "PlannedCheckpoint", "keyed_table_uri"]

log = logging.getLogger(__name__)


def keyed_table_uri(warehouse: str, job: str, operator: str, state: str) -> str:
    return state_table_uri(warehouse, job, operator, "keyed", state)


def _partition(table_kind: str) -> str:
    return "subtask" if table_kind == "operator" else "key_group"


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

        existing = {j.name: j for j in self.catalog.list_jobs()}.get(self.job)
        base = self.catalog.latest_checkpoint(self.job) if existing else None
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
        Every table goes back to the latest completed checkpoint's version."""
        abandoned = self.catalog.list_checkpoints(self.job, status=CheckpointStatus.IN_PROGRESS)
        if not abandoned:
            return []
        base = self.catalog.latest_checkpoint(self.job)
        schemas = {(s.operator, s.name): s.schema for s in self.catalog.list_states(self.job)}
        for t in base.tables if base else ():
            schema = schemas.get((t.operator, t.state))
            if schema is None:
                continue
            table = SnapshotTable(
                t.path,
                schema_from_text(schema),
                label=f"{self.job}/{t.operator}/{t.state}",
                partition=_partition(t.table_kind),
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
        if base is None:
            return RestorePlan(self.job, self.operator)
        schemas = {s.name: s.schema for s in self.catalog.list_states(self.job, self.operator)}
        restored: dict[str, dict[str, RestoredState]] = defaultdict(dict)
        for t in base.tables:
            if t.operator != self.operator:
                continue
            table = SnapshotTable(
                t.path,
                schema_from_text(schemas[t.state]),
                label=f"{self.job}/{self.operator}/{t.state}",
                partition=_partition(t.table_kind),
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
        )

    def check_compatible(
        self, planned: PlannedCheckpoint, registered: Sequence[StateSchema]
    ) -> PlannedCheckpoint:
        """Fail before processing when a registered state cannot restore from its stored
        schema; the plan, with the keyed states whose rows migrate marked for a full rewrite."""
        stored = {s.name: s for s in self.catalog.list_states(self.job, self.operator)}
        migrated = set()
        for state in registered:
            old = stored.get(state.name)
            if old is None:
                continue
            where = f"job {self.job!r}, operator {self.operator!r}, state {state.name!r}"
            if old.kind != state.kind:
                raise StateMigrationError(
                    f"{where}: the state kind changed from {old.kind} to {state.kind}; restore "
                    "needs the same kind (or a new state name)"
                )
            check = check_schema(schema_from_text(old.schema), schema_from_text(state.schema))
            if check.is_incompatible:
                raise StateMigrationError(
                    f"{where}: {check.reason}; the stored schema ({_fields(old.schema)}) cannot "
                    f"be restored as the new one ({_fields(state.schema)})"
                )
            if check.needs_migration:
                log.info("%s: migrating on restore (%s)", where, check.reason)
                if state.table_kind == "keyed":
                    migrated.add(state.name)
        return replace(planned, restore=replace(planned.restore, migrated=frozenset(migrated)))

    def commit(
        self,
        planned: PlannedCheckpoint,
        results: Iterable[StateSnapshotResult],
        *,
        metrics: Mapping[str, Any] | None = None,
    ) -> CheckpointRecord:
        """Commit every table and complete the checkpoint (with the run's ``metrics``); fail it
        on any error, with every table it committed rolled back to the base checkpoint's
        version."""
        checkpoint_id = planned.checkpoint_id
        committed: list[tuple[SnapshotTable, int]] = []
        try:
            by_table: dict[tuple[str, str], list[StateSnapshotResult]] = defaultdict(list)
            for r in results:
                by_table[r.table_kind, r.state].append(r)
            base_tables = {
                (t.table_kind, t.state): t
                for t in (planned.base.tables if planned.base else ())
                if t.operator == self.operator
            }
            tables: list[TableVersion] = [t for k, t in base_tables.items() if k not in by_table]
            states: list[StateRecord] = []
            for (table_kind, state), parts in sorted(by_table.items()):
                base = base_tables.get((table_kind, state))
                if (
                    table_kind == TIMERS
                    and base is None
                    and not any(p.files or p.changed_key_groups for p in parts)
                ):
                    continue  # no timers ever: no table
                first = parts[0]
                states.append(
                    StateRecord(
                        job=self.job,
                        operator=self.operator,
                        name=state,
                        kind=first.catalog_kind,
                        descriptor=first.descriptor,
                        schema=first.schema,
                        ttl=first.descriptor.get("ttl"),
                    )
                )
                replace_all = first.replace_all or state in planned.restore.migrated
                table, version = self._commit_table(
                    table_kind, state, parts, base, planned, replace_all
                )
                if base is not None:
                    committed.append((table, base.version))
                tables.append(version)
            fault_point("catalog:states")
            self.catalog.register_states(self.job, self.operator, states)
            fault_point("catalog:complete:before")
            record = self.catalog.complete_checkpoint(
                self.job, checkpoint_id, tables=tables, epoch=self.epoch, metrics=metrics
            )
            fault_point("catalog:complete:after")
            return record
        except BaseException as exc:
            self.fail(checkpoint_id, exc)
            if not isinstance(exc, ConcurrentRunError):  # the new holder resolves it
                self._roll_back(committed)
            raise

    def _roll_back(self, committed: Sequence[tuple[SnapshotTable, int]]) -> None:
        for table, version in committed:
            try:
                table.roll_back(version, fence=self.fence)
            except StateError as exc:  # the next run's commit restores the base version
                log.warning("job %s: rollback of %s failed: %s", self.job, table.uri, exc)

    def fail(self, checkpoint_id: int, exc: BaseException) -> None:
        """Mark the checkpoint FAILED (unless a newer writer began it again)."""
        self.catalog.fail_checkpoint(
            self.job, checkpoint_id, error=f"{type(exc).__name__}: {exc}", epoch=self.epoch
        )

    def _commit_table(
        self,
        table_kind: str,
        state: str,
        parts: Sequence[StateSnapshotResult],
        base: TableVersion | None,
        planned: PlannedCheckpoint,
        replace_all: bool,
    ) -> tuple[SnapshotTable, TableVersion]:
        uri = self.table_uri(state, table_kind)
        table = SnapshotTable(
            uri,
            schema_from_text(parts[0].schema),
            label=f"{self.job}/{self.operator}/{state}",
            partition=_partition(table_kind),
        )
        fault_point(f"commit:{table_kind}:{state}:before")
        version = table.commit(
            [f for p in parts for f in p.files],
            changed_key_groups={kg for p in parts for kg in p.changed_key_groups},
            base_version=base.version if base else None,
            app_id=f"{self.job}/{self.operator}/{state}",
            checkpoint_id=planned.checkpoint_id,
            replace_all=replace_all,
            fence=self.fence,
            metadata=CommitMetadata(
                checkpoint_id=planned.checkpoint_id,
                operator=self.operator,
                state=state,
                table_kind=table_kind,
                kind=parts[0].catalog_kind,
                schema=parts[0].schema,
                descriptor=parts[0].descriptor,
                ttl=parts[0].descriptor.get("ttl"),
                parallelism=planned.parallelism,
                max_parallelism=planned.max_parallelism,
            ),
        )
        fault_point(f"commit:{table_kind}:{state}:after")
        sizes = table.key_group_sizes(version)
        return table, TableVersion(
            operator=self.operator,
            state=state,
            table_kind=table_kind,
            path=uri,
            version=version,
            rows=sum(r for r, _ in sizes.values()),
            bytes=sum(b for _, b in sizes.values()),
            key_groups=sizes,
        )


def _fields(schema_text: str) -> str:
    schema = schema_from_text(schema_text)
    return ", ".join(f"{f.name}: {f.type}" for f in schema)
