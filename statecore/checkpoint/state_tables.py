"""The state tables of a checkpoint as one commit participant.

The tasks' snapshot files (:class:`~statecore.runtime.task.StateSnapshotResult`) are grouped by
table, and each table (keyed state, operator state, timers, changes) gets one Delta commit on
the base checkpoint's version: its changed key groups replaced (incremental), or the whole table
when the state migrated. Tables the run did not touch keep the base checkpoint's version. A
rollback restores each committed table to that version (see
:mod:`statecore.checkpoint.participants` for the protocol).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter

from statecore.catalog import StateRecord, TableVersion
from statecore.config import StatecoreConfig
from statecore.errors import StateError
from statecore.runtime.task import StateSnapshotResult
from statecore.snapshot import TIMERS, Fence, SnapshotFile, SnapshotTable, state_table_uri
from statecore.snapshot.changelog import CHANGES
from statecore.snapshot.commits import CommitMetadata
from statecore.snapshot.faults import fault_point
from statecore.types import schema_from_text

__all__ = ["StateTables", "carried_sizes", "table_partition"]

log = logging.getLogger(__name__)


def table_partition(table_kind: str) -> str:
    """The partition column of a table of ``table_kind``."""
    return "subtask" if table_kind == "operator" else "key_group"


def carried_sizes(
    base: Mapping[int, tuple[int, int]] | None,
    files: Iterable[SnapshotFile],
    *,
    changed_key_groups: Iterable[int],
    replace_all: bool = False,
    append: bool = False,
) -> dict[int, tuple[int, int]]:
    """The ``(rows, bytes)`` of every key group after a commit of ``files`` on a version whose
    sizes are ``base`` (``None``: no base, the table is ``files``), as
    :meth:`SnapshotTable.commit` commits them: the changed key groups (and, unless
    ``append``, those ``files`` belong to) lose their files, then ``files`` are added. Only the
    commit's own key groups are touched; every other one keeps the base's sizes.

    >>> carried_sizes({0: (5, 50), 1: (3, 30)}, [], changed_key_groups=[1])
    {0: (5, 50)}
    """
    sizes: dict[int, tuple[int, int]] = {}
    files = list(files)
    if base is not None and not replace_all:
        sizes = dict(base)
        removed = set(changed_key_groups)
        if not append:
            removed |= {f.key_group for f in files}
        for key_group in removed:
            sizes.pop(key_group, None)
    for f in files:
        rows, size = sizes.get(f.key_group, (0, 0))
        sizes[f.key_group] = (rows + f.rows, size + f.size)
    return dict(sorted(sizes.items()))


class StateTables:
    """The tables of one operator's states at one checkpoint (a commit participant).

    After :meth:`commit`, :attr:`tables` names the version of every table of the checkpoint
    (those not committed keep the base's) and :attr:`states` the states to register.
    """

    def __init__(
        self,
        config: StatecoreConfig,
        *,
        job: str,
        operator: str,
        results: Iterable[StateSnapshotResult],
        base: Sequence[TableVersion],
        migrated: frozenset[str] = frozenset(),
        parallelism: int,
        max_parallelism: int,
        watermark: int | None = None,
    ) -> None:
        self.config = config
        self.job = job
        self.operator = operator
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.migrated = migrated
        self.watermark = watermark
        self._by_table: dict[tuple[str, str], list[StateSnapshotResult]] = defaultdict(list)
        for r in results:
            self._by_table[r.table_kind, r.state].append(r)
        self._base = {(t.table_kind, t.state): t for t in base if t.operator == operator}
        self._committed: list[tuple[SnapshotTable, int]] = []
        self.tables: list[TableVersion] = []
        self.states: list[StateRecord] = []

    @property
    def name(self) -> str:
        return f"state tables of {self.job}/{self.operator}"

    def check(self) -> None:
        """Nothing to check: the states' schemas were checked before the tasks ran."""

    def commit(self, checkpoint_id: int, fence: Fence | None) -> bool:
        tables = [t for k, t in self._base.items() if k not in self._by_table]
        states: list[StateRecord] = []
        for (table_kind, state), parts in sorted(self._by_table.items()):
            base = self._base.get((table_kind, state))
            if (
                table_kind in (TIMERS, CHANGES)
                and base is None
                and not any(p.files or p.changed_key_groups for p in parts)
            ):
                continue  # no timers (no changes) ever: no table
            first = parts[0]
            if table_kind != CHANGES:  # a changes table belongs to its keyed state
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
            replace_all = first.replace_all or state in self.migrated
            tables.append(
                self._commit_table(
                    table_kind, state, parts, base, checkpoint_id, replace_all, fence
                )
            )
        self.tables, self.states = tables, states
        return True

    def roll_back(self, completed: int | None, fence: Fence | None) -> None:
        """Every table this checkpoint committed back to the base checkpoint's version (the
        latest completed one when the checkpoint was planned: ``completed`` is not needed)."""
        for table, version in self._committed:
            try:
                table.roll_back(version, fence=fence)
            except StateError as exc:  # the next run's commit restores the base version
                log.warning("job %s: rollback of %s failed: %s", self.job, table.uri, exc)

    def _commit_table(
        self,
        table_kind: str,
        state: str,
        parts: Sequence[StateSnapshotResult],
        base: TableVersion | None,
        checkpoint_id: int,
        replace_all: bool,
        fence: Fence | None,
    ) -> TableVersion:
        uri = state_table_uri(self.config.warehouse, self.job, self.operator, table_kind, state)
        table = SnapshotTable(
            uri,
            schema_from_text(parts[0].schema),
            label=f"{self.job}/{self.operator}/{state}",
            partition=table_partition(table_kind),
        )
        fault_point(f"commit:{table_kind}:{state}:before")
        if base is not None:  # rolled back to it if this commit or a later one fails
            self._committed.append((table, base.version))
        version = table.commit(
            [f for p in parts for f in p.files],
            changed_key_groups={kg for p in parts for kg in p.changed_key_groups},
            base_version=base.version if base else None,
            app_id=f"{self.job}/{self.operator}/{state}",
            checkpoint_id=checkpoint_id,
            replace_all=replace_all and table_kind != CHANGES,
            append=any(p.append for p in parts),
            fence=fence,
            metadata=CommitMetadata(
                checkpoint_id=checkpoint_id,
                operator=self.operator,
                state=state,
                table_kind=table_kind,
                kind=parts[0].catalog_kind,
                schema=parts[0].schema,
                descriptor=parts[0].descriptor,
                ttl=parts[0].descriptor.get("ttl"),
                parallelism=self.parallelism,
                max_parallelism=self.max_parallelism,
                watermark=self.watermark,
            ),
        )
        fault_point(f"commit:{table_kind}:{state}:after")
        if base is not None and not base.key_groups and base.bytes:
            sizes = table.key_group_sizes(version)  # nothing to carry forward: counted
        else:
            sizes = carried_sizes(
                base.key_groups if base is not None else None,
                [f for p in parts for f in p.files],
                changed_key_groups={kg for p in parts for kg in p.changed_key_groups},
                replace_all=replace_all and table_kind != CHANGES,
                append=any(p.append for p in parts),
            )
        return TableVersion(
            operator=self.operator,
            state=state,
            table_kind=table_kind,
            path=uri,
            version=version,
            rows=sum(map(itemgetter(0), sizes.values())),
            bytes=sum(map(itemgetter(1), sizes.values())),
            key_groups=sizes,
        )
