"""What a task restores: the files of the checkpoint it starts from, read where it runs.

The driver plans the restore (:class:`RestorePlan`: per table, the files of the completed
checkpoint's version); each task reads only what it needs: the key groups of its range for keyed
state and timers, and every row of each operator state, redistributed for its subtask. Stored rows
whose schema is older but compatible are migrated on the way in
(:mod:`statecore.compatibility`).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from statecore.backends.base import RestoreSource, snapshot_schema
from statecore.backends.operator import OperatorStateMode, repartition
from statecore.backends.timers import timers_schema
from statecore.compatibility import check_schema, migrate_rows
from statecore.descriptors import StateDescriptor
from statecore.errors import CorruptSnapshotError, StateMigrationError
from statecore.keygroups import KeyGroupRange
from statecore.snapshot import TIMERS, SnapshotTable, TableFile
from statecore.snapshot.changelog import CHANGES, apply_changes, changes_schema
from statecore.types import TypeInfo, schema_from_text, schema_to_text

__all__ = ["RestoredState", "RestorePlan", "StateSchema", "TaskFiles", "fingerprint"]

TaskFiles = dict[tuple[str, str, str], dict[int, tuple[str, ...]]]
"""What one task's share of a checkpoint is made of: per table ``(table_kind, state, uri)``,
per key group of its range (per subtask for operator state), the file paths, sorted."""


def fingerprint(files: Mapping[tuple[str, str, str], Mapping[int, Collection[str]]]) -> str:
    """A digest of a task's files (:data:`TaskFiles`): what its state consists of.

    Tables and parts without files do not count, so a task's own account of what it restored
    and wrote, and a completed checkpoint's listing, digest alike exactly when they name the
    same files. File names carry a random part per write, so another attempt, writer or
    operation never makes the same digest; the checkpoint id is left out on purpose: a
    checkpoint that changed nothing of the task's (an empty micro-batch) names the same files,
    and its state is the same.
    """
    canonical = sorted(
        (list(table), sorted((part, sorted(paths)) for part, paths in parts.items() if paths))
        for table, parts in files.items()
    )
    canonical = [c for c in canonical if c[1]]
    text = json.dumps(canonical, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class StateSchema:
    """A state a task registered: its table kind, catalog kind and snapshot schema (as text)."""

    name: str
    table_kind: str
    kind: str
    schema: str


def _fields(schema_text: str) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema_from_text(schema_text))


@dataclass(frozen=True)
class RestoredState:
    """One table of the checkpoint being restored."""

    uri: str
    schema: str  # schema_to_text of the rows the catalog registered last
    files: tuple[TableFile, ...]


@dataclass(frozen=True)
class RestorePlan:
    """What the tasks of one operator restore (nothing when ``checkpoint_id`` is ``None``).

    ``states`` are keyed states, ``operator_states`` operator states, ``timers`` the timers table;
    ``parallelism`` is the restored checkpoint's; ``migrated`` names the keyed states whose schema
    migrates, which the next snapshot rewrites in full; ``changes`` are the pending change files
    of keyed states (:mod:`statecore.snapshot.changelog`).
    """

    job: str
    operator: str
    checkpoint_id: int | None = None
    states: dict[str, RestoredState] = field(default_factory=dict)
    parallelism: int | None = None
    operator_states: dict[str, RestoredState] = field(default_factory=dict)
    timers: RestoredState | None = None
    migrated: frozenset[str] = frozenset()
    changes: dict[str, RestoredState] = field(default_factory=dict)
    """The changes table of each keyed state that has one (changelog checkpoints): its
    change files are applied over the state's files on restore."""
    registered: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """What the catalog registered for the operator: state → (kind, schema as text). A task
    checks each state its function registers against it (:meth:`check_state`), so the driver
    never runs the function to learn its states."""

    @property
    def is_restored(self) -> bool:
        return self.checkpoint_id is not None

    def _label(self, state: str) -> str:
        return f"job {self.job!r}, operator {self.operator!r}, state {state!r}"

    def check_state(self, state: StateSchema) -> bool:
        """Whether ``state``, as a task's function registers it now, restores with its rows
        migrated to its schema; a :class:`StateMigrationError` when it cannot restore from what
        the catalog registered (another kind, an incompatible schema)."""
        stored = self.registered.get(state.name)
        if stored is None:
            return False
        kind, schema = stored
        where = self._label(state.name)
        if kind != state.kind:
            raise StateMigrationError(
                f"{where}: the state kind changed from {kind} to {state.kind}; restore "
                "needs the same kind (or a new state name)"
            )
        check = check_schema(schema_from_text(schema), schema_from_text(state.schema))
        if check.is_incompatible:
            raise StateMigrationError(
                f"{where}: {check.reason}; the stored schema ({_fields(schema)}) cannot "
                f"be restored as the new one ({_fields(state.schema)})"
            )
        return check.needs_migration

    def migrated_states(self, registered: Iterable[StateSchema]) -> frozenset[str]:
        """The keyed states of ``registered`` whose rows migrate (rewritten in full by the next
        snapshot), each state checked by :meth:`check_state`."""
        return frozenset(
            s.name for s in registered if self.check_state(s) and s.table_kind == "keyed"
        )

    def source(self, key_groups: Collection[int], key_type: TypeInfo) -> RestoreSource:
        """A ``RestoreSource`` reading only ``key_groups`` (in key-group order), migrating older
        rows; a state that cannot restore fails as it is registered, before any row is read."""

        def read(descriptor: StateDescriptor) -> Iterator[tuple[int, pa.Table]]:
            expected = snapshot_schema(key_type, descriptor)
            self.check_state(
                StateSchema(
                    descriptor.name, "keyed", descriptor.kind.value, schema_to_text(expected)
                )
            )
            restored = self.states.get(descriptor.name)
            if restored is None:
                return iter(())
            label = self._label(descriptor.name)
            changes = self.changes.get(descriptor.name)
            if changes is not None and changes.files:
                return self._read_with_changes(restored, changes, key_groups, expected, label)
            return self._read(restored, key_groups, expected, label)

        return read

    def _read_with_changes(
        self,
        restored: RestoredState,
        changes: RestoredState,
        key_groups: Collection[int] | None,
        expected: pa.Schema,
        label: str,
    ) -> Iterator[tuple[int, pa.Table]]:
        """The materialized rows of each key group with its pending changes applied (in
        checkpoint order), then migrated. The state files and the change files are each read
        as one stream in key-group order (several at a time,
        :func:`~statecore.snapshot.reads.read_table_files`), taken a key group at a time."""
        stored = schema_from_text(restored.schema)

        def in_order(files: tuple[TableFile, ...]) -> list[TableFile]:
            # by key group, the plan's order kept within one
            mine = (f for f in files if key_groups is None or f.key_group in key_groups)
            return sorted(mine, key=lambda f: f.key_group)

        mine, changed = in_order(restored.files), in_order(changes.files)
        counts = Counter(f.key_group for f in mine)
        change_counts = Counter(f.key_group for f in changed)
        state_rows = SnapshotTable(restored.uri, stored, label=label).read_files(mine)
        change_rows = SnapshotTable(changes.uri, changes_schema(stored), label=label).read_files(
            changed
        )
        for kg in sorted(counts.keys() | change_counts.keys()):
            parts = [next(state_rows)[1] for _ in range(counts[kg])]
            rows = (
                pa.concat_tables(parts, promote_options="default")
                if parts
                else stored.empty_table()
            )
            pending = [next(change_rows)[1] for _ in range(change_counts[kg])]
            merged = apply_changes(rows, pending)
            if merged.num_rows:
                yield kg, migrate_rows(merged, expected, label=label)

    def pending_changes(self, state: str) -> dict[int, tuple[int, int]]:
        """Per key group: the pending change files of ``state`` and their rows."""
        out: dict[int, tuple[int, int]] = {}
        changes = self.changes.get(state)
        for f in changes.files if changes is not None else ():
            files, rows = out.get(f.key_group, (0, 0))
            out[f.key_group] = (files + 1, rows + f.rows)
        return out

    def state_rows(self, state: str) -> dict[int, int]:
        """Per key group: the materialized rows of ``state``."""
        out: dict[int, int] = {}
        restored = self.states.get(state)
        for f in restored.files if restored is not None else ():
            out[f.key_group] = out.get(f.key_group, 0) + f.rows
        return out

    def _read(
        self,
        restored: RestoredState,
        key_groups: Collection[int] | None,
        expected: pa.Schema,
        label: str,
        partition: str = "key_group",
    ) -> Iterator[tuple[int, pa.Table]]:
        mine = sorted(
            (f for f in restored.files if key_groups is None or f.key_group in key_groups),
            key=lambda f: (f.key_group, f.path),
        )
        table = SnapshotTable(restored.uri, expected, label=label, partition=partition)
        for part, rows in table.read_files(mine):
            yield part, migrate_rows(rows, expected, label=label)

    def file_paths(self, key_groups: Collection[int]) -> dict[str, dict[int, tuple[str, ...]]]:
        """Per keyed state and key group of ``key_groups``: the files being restored (what a
        task-local copy of the state must match to be reused)."""
        out: dict[str, dict[int, tuple[str, ...]]] = {}
        for name, restored in self.states.items():
            by_kg: dict[int, list[str]] = {}
            for f in restored.files:
                if f.key_group in key_groups:
                    by_kg.setdefault(f.key_group, []).append(f.path)
            changes = self.changes.get(name)
            for f in changes.files if changes is not None else ():
                if f.key_group in key_groups:  # a local copy must have applied these too
                    by_kg.setdefault(f.key_group, []).append(f"{CHANGES}/{f.path}")
            out[name] = {kg: tuple(sorted(paths)) for kg, paths in sorted(by_kg.items())}
        return out

    def task_files(self, key_groups: Collection[int], subtask: int) -> TaskFiles:
        """The files of this checkpoint that a task owning ``key_groups`` as ``subtask``
        restores from: keyed state, pending changes and timers of its key groups, its subtask's
        operator state."""
        out: TaskFiles = {}
        tables = [("keyed", name, r) for name, r in self.states.items()]
        tables += [(CHANGES, name, r) for name, r in self.changes.items()]
        tables += [("operator", name, r) for name, r in self.operator_states.items()]
        if self.timers is not None:
            tables.append((TIMERS, TIMERS, self.timers))
        for kind, name, restored in tables:
            mine: Collection[int] = (subtask,) if kind == "operator" else key_groups
            by_part: dict[int, list[str]] = {}
            for f in restored.files:
                if f.key_group in mine:
                    by_part.setdefault(f.key_group, []).append(f.path)
            out[(kind, name, restored.uri)] = {p: tuple(sorted(v)) for p, v in by_part.items()}
        return out

    def fingerprint(self, key_groups: Collection[int], subtask: int) -> str:
        """:func:`fingerprint` of this checkpoint's :meth:`task_files` for one task (of the
        empty state when nothing is restored)."""
        return fingerprint(self.task_files(key_groups, subtask))

    def bytes_to_restore(self, key_groups: Collection[int]) -> int:
        """What a task of ``key_groups`` reads to restore: its key groups' files of every keyed
        state, of their pending changes and of the timers, and every operator-state file (each
        subtask reads them all)."""
        keyed = [*self.states.values(), *self.changes.values()]
        keyed += [self.timers] if self.timers else []
        return sum(
            f.size for restored in keyed for f in restored.files if f.key_group in key_groups
        ) + sum(f.size for restored in self.operator_states.values() for f in restored.files)

    def restore_timing(
        self, key_groups: Collection[int], subtask: int, seconds: float
    ) -> dict[str, Any]:
        """One subtask's restore as a run records it (the sample restore-time estimates are
        fitted on, :mod:`statecore.ops.estimate`)."""
        return {
            "subtask": subtask,
            "bytes": self.bytes_to_restore(key_groups),
            "seconds": round(seconds, 6),
        }

    def restored_key_groups(self, state: str, key_groups: KeyGroupRange) -> set[int]:
        """The key groups of ``key_groups`` that state ``state`` has files for."""
        tables = (self.states.get(state), self.changes.get(state))
        return {
            f.key_group
            for t in tables
            if t is not None
            for f in t.files
            if f.key_group in key_groups
        }

    def timer_rows(
        self, key_groups: KeyGroupRange, key_type: TypeInfo
    ) -> Iterator[tuple[int, pa.Table]]:
        """``(key_group, rows)`` of the timers of ``key_groups``."""
        if self.timers is None:
            return iter(())
        return self._read(self.timers, key_groups, timers_schema(key_type), self._label("timers"))

    def operator_state(self, subtask: int, parallelism: int) -> dict[str, pa.Table]:
        """The rows of each operator state that ``subtask`` of ``parallelism`` restores."""
        if not self.operator_states:
            return {}
        old_p = self.parallelism or 1
        states: dict[str, tuple[OperatorStateMode, list[range]]] = {}
        tables: dict[str, pa.Table] = {}
        for name, restored in self.operator_states.items():
            stored = schema_from_text(restored.schema)
            by_subtask: dict[int, list[pa.Table]] = {}
            for sub, rows in SnapshotTable(
                restored.uri, stored, label=self._label(name), partition="subtask"
            ).read_files(restored.files):
                by_subtask.setdefault(sub, []).append(rows)
            if not by_subtask:
                continue
            parts = [
                pa.concat_tables(by_subtask.get(i, []), promote_options="default")
                if by_subtask.get(i)
                else None
                for i in range(old_p)
            ]
            if any(sub >= old_p for sub in by_subtask):
                raise CorruptSnapshotError(
                    f"{self._label(name)}: rows of subtasks {sorted(by_subtask)} in a checkpoint "
                    f"of parallelism {old_p}"
                )
            modes = {
                m
                for part in parts
                if part is not None
                for m in part.column("mode").unique().to_pylist()
            }
            if len(modes) != 1:
                raise CorruptSnapshotError(f"{self._label(name)}: mixed modes {sorted(modes)}")
            offsets, ranges, present = 0, [], []
            for part in parts:
                n = 0 if part is None else part.num_rows
                ranges.append(range(offsets, offsets + n))
                offsets += n
                if part is not None:
                    present.append(part)
            states[name] = (OperatorStateMode(modes.pop()), ranges)
            tables[name] = pa.concat_tables(present, promote_options="default")
        mine = repartition(states, old_p, parallelism)[subtask]
        return {
            name: tables[name].take(pa.array(indices, pa.int64())) for name, indices in mine.items()
        }
