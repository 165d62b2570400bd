"""Driver side of a checkpoint: plan the restore, commit every table, complete it in the catalog.

A checkpoint is complete only when its catalog row is committed, naming the Delta version of every
table. States the run did not touch keep the version of the checkpoint it restored from.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from statecore.catalog import (
    Catalog,
    CheckpointKind,
    CheckpointRecord,
    CheckpointStatus,
    StateRecord,
    TableVersion,
)
from statecore.config import StatecoreConfig
from statecore.errors import MaxParallelismMismatchError, StateMigrationError
from statecore.keygroups import check_parallelism
from statecore.snapshot import SnapshotTable
from statecore.task import RestoredState, RestorePlan, StateSnapshotResult
from statecore.types import schema_from_text

__all__ = ["CheckpointCoordinator", "PlannedCheckpoint", "keyed_table_uri"]

log = logging.getLogger(__name__)


def keyed_table_uri(warehouse: str, job: str, operator: str, state: str) -> str:
    return f"{warehouse.rstrip('/')}/{job}/{operator}/keyed/{state}"


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

    def __init__(self, config: StatecoreConfig, catalog: Catalog, *, job: str, operator: str):
        self.config = config
        self.catalog = catalog
        self.job = job
        self.operator = operator

    def table_uri(self, state: str) -> str:
        return keyed_table_uri(self.config.warehouse, self.job, self.operator, state)

    def plan(
        self, checkpoint_id: int, *, parallelism: int | None, max_parallelism: int | None,
        default_parallelism: int,
    ) -> PlannedCheckpoint:
        """Resolve parallelism, check it against the last checkpoint, and begin the checkpoint."""
        from statecore.keygroups import compute_default_max_parallelism

        existing = {j.name: j for j in self.catalog.list_jobs()}.get(self.job)
        base = self.catalog.latest_checkpoint(self.job) if existing else None
        p = parallelism or (existing.parallelism if existing else default_parallelism)
        stored_max = base.max_parallelism if base else (
            existing.max_parallelism if existing else None)
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
            self.job, checkpoint_id, kind=CheckpointKind.CHECKPOINT, parallelism=p,
            max_parallelism=max_p, restored_from=base.checkpoint_id if base else None,
        )
        replayed = record.status is CheckpointStatus.COMPLETED
        if replayed:
            log.info("job %s: checkpoint %s is already complete; replay is a no-op",
                     self.job, checkpoint_id)
        return PlannedCheckpoint(checkpoint_id, p, max_p, self._restore_plan(base), base, replayed)

    def _restore_plan(self, base: CheckpointRecord | None) -> RestorePlan:
        if base is None:
            return RestorePlan(self.job, self.operator)
        schemas = {s.name: s.schema for s in self.catalog.list_states(self.job, self.operator)}
        states = {}
        for t in base.tables:
            if t.operator != self.operator or t.table_kind != "keyed":
                continue
            table = SnapshotTable(t.path, schema_from_text(schemas[t.state]),
                                  label=f"{self.job}/{self.operator}/{t.state}")
            states[t.state] = RestoredState(t.path, schemas[t.state],
                                            tuple(table.files(t.version)))
        return RestorePlan(self.job, self.operator, base.checkpoint_id, states)

    def check_compatible(self, schemas: dict[str, str]) -> None:
        """Fail before processing when a registered state's schema differs from the stored one."""
        stored = {s.name: s for s in self.catalog.list_states(self.job, self.operator)}
        for name, schema in schemas.items():
            if name in stored and stored[name].schema != schema:
                raise StateMigrationError(
                    f"job {self.job!r}, operator {self.operator!r}, state {name!r}: the stored "
                    f"schema {schema_from_text(stored[name].schema)} is not compatible with the "
                    f"descriptor's {schema_from_text(schema)}"
                )

    def commit(
        self, planned: PlannedCheckpoint, results: Iterable[StateSnapshotResult]
    ) -> CheckpointRecord:
        """Commit every state's table and complete the checkpoint; fail it on any error."""
        checkpoint_id = planned.checkpoint_id
        try:
            by_state: dict[str, list[StateSnapshotResult]] = defaultdict(list)
            for r in results:
                by_state[r.state].append(r)
            base_tables = {t.state: t for t in (planned.base.tables if planned.base else ())
                           if t.operator == self.operator and t.table_kind == "keyed"}
            tables: list[TableVersion] = [t for s, t in base_tables.items() if s not in by_state]
            states: list[StateRecord] = []
            for state, parts in sorted(by_state.items()):
                first = parts[0]
                states.append(StateRecord(job=self.job, operator=self.operator, name=state,
                                          kind=first.descriptor["kind"],
                                          descriptor=first.descriptor, schema=first.schema,
                                          ttl=first.descriptor.get("ttl")))
                tables.append(self._commit_state(state, parts, base_tables.get(state),
                                                 checkpoint_id))
            self.catalog.register_states(self.job, self.operator, states)
            return self.catalog.complete_checkpoint(self.job, checkpoint_id, tables=tables)
        except BaseException as exc:
            self.catalog.fail_checkpoint(self.job, checkpoint_id, error=f"{type(exc).__name__}: "
                                         f"{exc}")
            raise

    def _commit_state(
        self, state: str, parts: Sequence[StateSnapshotResult], base: TableVersion | None,
        checkpoint_id: int,
    ) -> TableVersion:
        uri = self.table_uri(state)
        table = SnapshotTable(uri, schema_from_text(parts[0].schema),
                              label=f"{self.job}/{self.operator}/{state}")
        version = table.commit(
            [f for p in parts for f in p.files],
            changed_key_groups={kg for p in parts for kg in p.changed_key_groups},
            base_version=base.version if base else None,
            app_id=f"{self.job}/{self.operator}/{state}",
            checkpoint_id=checkpoint_id,
        )
        sizes = table.key_group_sizes(version)
        return TableVersion(
            operator=self.operator, state=state, table_kind="keyed", path=uri, version=version,
            rows=sum(r for r, _ in sizes.values()), bytes=sum(b for _, b in sizes.values()),
            key_groups=sizes,
        )
