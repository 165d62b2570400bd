"""A task's snapshot: what changed in its state, written as snapshot files, and what the
committer needs to know about them (:class:`StateSnapshotResult`, one per table).

Per keyed state the changed key groups (or, with changelog checkpoints, a change file per
changed key group, the key group written whole when it is time to materialize it), the changed
key groups of the timers, and the whole operator state of the subtask.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from itertools import chain
from typing import Any

import pyarrow as pa

from statecore.backends.base import KeyedStateBackend, snapshot_schema
from statecore.backends.operator import OperatorStateStore
from statecore.backends.timers import timers_schema
from statecore.runtime.restore import RestorePlan, StateSchema
from statecore.snapshot import TIMERS, SnapshotFile, write_key_group_files
from statecore.snapshot.changelog import CHANGES, ChangelogConfig, change_rows, changes_schema
from statecore.types import schema_to_text

__all__ = ["SnapshotWriter", "StateSchema", "StateSnapshotResult", "TableUris", "table_uri"]

TableUris = Mapping[str, str] | Callable[[str, str], str]
"""Where a task writes: state name → table URI, or ``(table_kind, state) → table URI``."""


@dataclass(frozen=True)
class StateSnapshotResult:
    """What a task reports to the committer for one table (``table_kind`` keyed, operator or
    timers). Operator-state tables are replaced as a whole (``replace_all``)."""

    state: str
    schema: str
    descriptor: dict[str, Any]
    changed_key_groups: tuple[int, ...]
    files: tuple[SnapshotFile, ...]
    table_kind: str = "keyed"
    kind: str = ""
    replace_all: bool = False
    append: bool = False
    """Add ``files`` without replacing their key groups; remove only the files of
    ``changed_key_groups`` (a changes table: change files are appended, materialized key groups
    lose theirs)."""

    @property
    def catalog_kind(self) -> str:
        return self.kind or str(self.descriptor["kind"])

    def to_json_dict(self) -> dict[str, Any]:
        return {**asdict(self), "files": [asdict(f) for f in self.files]}

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> StateSnapshotResult:
        return cls(
            state=data["state"],
            schema=data["schema"],
            descriptor=data["descriptor"],
            changed_key_groups=tuple(data["changed_key_groups"]),
            files=tuple(SnapshotFile(**f) for f in data["files"]),
            table_kind=data.get("table_kind", "keyed"),
            kind=data.get("kind", ""),
            replace_all=data.get("replace_all", False),
            append=data.get("append", False),
        )


def table_uri(table_uris: TableUris, table_kind: str, state: str) -> str:
    """The URI of one table of ``table_kind`` (keyed, operator or timers) and ``state``."""
    if callable(table_uris):
        return table_uris(table_kind, state)
    return table_uris[state]


class SnapshotWriter:
    """Writes the snapshot of one task's state: its keyed states (from ``backend``, in full or
    as changes when ``changelog`` is on), its timers and its subtask's ``operator_state``."""

    def __init__(
        self,
        backend: KeyedStateBackend,
        operator_state: OperatorStateStore,
        restore: RestorePlan,
        changelog: ChangelogConfig | None,
        subtask_index: int,
    ) -> None:
        self.backend = backend
        self.operator_state = operator_state
        self.restore = restore
        self.changelog = changelog
        self.subtask_index = subtask_index

    def write(self, table_uris: TableUris, checkpoint_id: int) -> list[StateSnapshotResult]:
        """Write what changed; what the committer needs, one result per table."""
        results = self._snapshot_keyed(table_uris, checkpoint_id)
        results += self._snapshot_timers(table_uris, checkpoint_id)
        results += self._snapshot_operator_state(table_uris, checkpoint_id)
        return results

    def written_files(self, results: list[StateSnapshotResult]) -> dict[str, dict[int, list[str]]]:
        """Per keyed state, the files of each key group this snapshot changed, as
        :meth:`RestorePlan.file_paths` will name them when restoring the checkpoint."""
        written: dict[str, dict[int, list[str]]] = {}
        for r in results:
            if r.table_kind == "keyed":
                by_kg = written.setdefault(r.state, {})
                for kg in r.changed_key_groups:
                    by_kg[kg] = [f.path for f in r.files if f.key_group == kg]
        restored: dict[str, dict[int, tuple[str, ...]]] = {}
        for r in results:
            if r.table_kind != CHANGES or not r.files:
                continue
            if not restored:
                restored = self.restore.file_paths(self.backend.key_group_range)
            by_kg = written.setdefault(r.state, {})
            for f in r.files:  # appended to what the key group had
                before = by_kg.get(
                    f.key_group, list(restored.get(r.state, {}).get(f.key_group, ()))
                )
                by_kg[f.key_group] = [*before, f"{CHANGES}/{f.path}"]
        return written

    def _write(
        self,
        table_uris: TableUris,
        table_kind: str,
        name: str,
        parts: Iterable[tuple[int, pa.Table]],
        checkpoint_id: int,
        partition: str = "key_group",
    ) -> tuple[SnapshotFile, ...]:
        """Write the non-empty ``(part, rows)`` of ``parts`` (built lazily, while earlier
        ones are being written); a table with nothing to write needs no URI."""
        non_empty = ((p, r) for p, r in parts if r.num_rows)
        first = next(non_empty, None)
        if first is None:
            return ()
        return tuple(
            write_key_group_files(
                table_uri(table_uris, table_kind, name),
                chain([first], non_empty),
                checkpoint_id=checkpoint_id,
                subtask=self.subtask_index,
                partition=partition,
            )
        )

    def _snapshot_keyed(
        self, table_uris: TableUris, checkpoint_id: int
    ) -> list[StateSnapshotResult]:
        backend = self.backend
        results = []
        for name, descriptor in backend.descriptors.items():
            if self.changelog is not None and name not in self.restore.migrated:
                results += self._snapshot_changes(table_uris, checkpoint_id, name, self.changelog)
                continue
            changed = backend.changed_key_groups(name)
            if name in self.restore.migrated:  # rewrite every key group in the new schema
                changed |= self.restore.restored_key_groups(name, backend.key_group_range)
            files = self._write(
                table_uris,
                "keyed",
                name,
                ((kg, backend.snapshot_key_group(name, kg)) for kg in sorted(changed)),
                checkpoint_id,
            )
            results.append(
                StateSnapshotResult(
                    state=name,
                    schema=schema_to_text(snapshot_schema(backend.key_type, descriptor)),
                    descriptor=descriptor.describe(),
                    changed_key_groups=tuple(sorted(changed)),
                    files=files,
                    replace_all=name in self.restore.migrated,
                )
            )
            applied = sorted(changed & self.restore.pending_changes(name).keys())
            if applied:  # written whole: their pending changes are in the new files
                results.append(self._changes_result(name, descriptor, applied, ()))
        return results

    def _snapshot_changes(
        self, table_uris: TableUris, checkpoint_id: int, name: str, config: ChangelogConfig
    ) -> list[StateSnapshotResult]:
        """One state's snapshot as changes: a change file per changed key group, or the key
        group whole when ``config`` says it is time to materialize it."""
        backend = self.backend
        descriptor = backend.descriptor(name)
        keys = backend.changed_keys(name)
        pending = self.restore.pending_changes(name)
        state_rows = self.restore.state_rows(name)
        whole = [
            kg
            for kg, changed in keys.items()
            if config.materializes(
                pending_files=pending.get(kg, (0, 0))[0],
                pending_rows=pending.get(kg, (0, 0))[1],
                changed_keys=len(changed),
                state_rows=state_rows.get(kg, 0),
            )
        ]
        logged = [kg for kg in keys if kg not in set(whole)]

        def changes() -> Iterable[tuple[int, pa.Table]]:
            for kg in logged:
                rows, tombstones = backend.snapshot_changes(name, kg, keys[kg])
                yield kg, change_rows(rows, tombstones, checkpoint_id=checkpoint_id)

        schema = snapshot_schema(backend.key_type, descriptor)
        files = self._write(
            table_uris,
            "keyed",
            name,
            ((kg, backend.snapshot_key_group(name, kg)) for kg in whole),
            checkpoint_id,
        )
        change_files = self._write(table_uris, CHANGES, name, changes(), checkpoint_id)
        return [
            StateSnapshotResult(
                state=name,
                schema=schema_to_text(schema),
                descriptor=descriptor.describe(),
                changed_key_groups=tuple(whole),
                files=files,
            ),
            self._changes_result(
                name, descriptor, [kg for kg in whole if kg in pending], change_files
            ),
        ]

    def _changes_result(
        self,
        name: str,
        descriptor: Any,
        materialized: list[int],
        files: tuple[SnapshotFile, ...],
    ) -> StateSnapshotResult:
        """The changes table's part: ``files`` appended, the files of ``materialized`` key
        groups removed."""
        schema = changes_schema(snapshot_schema(self.backend.key_type, descriptor))
        return StateSnapshotResult(
            state=name,
            schema=schema_to_text(schema),
            descriptor=descriptor.describe(),
            changed_key_groups=tuple(materialized),
            files=files,
            table_kind=CHANGES,
            append=True,
        )

    def _snapshot_timers(
        self, table_uris: TableUris, checkpoint_id: int
    ) -> list[StateSnapshotResult]:
        timers = self.backend.timer_service
        changed = sorted(timers.changed_key_groups())
        files = self._write(
            table_uris,
            TIMERS,
            TIMERS,
            ((kg, timers.snapshot_key_group(kg)) for kg in changed),
            checkpoint_id,
        )
        return [
            StateSnapshotResult(
                state=TIMERS,
                schema=schema_to_text(timers_schema(self.backend.key_type)),
                descriptor={"kind": TIMERS},
                changed_key_groups=tuple(changed),
                files=files,
                table_kind=TIMERS,
                kind=TIMERS,
            )
        ]

    def _snapshot_operator_state(
        self, table_uris: TableUris, checkpoint_id: int
    ) -> list[StateSnapshotResult]:
        store = self.operator_state
        results = []
        for name in store.state_names:
            files = self._write(
                table_uris,
                "operator",
                name,
                [(self.subtask_index, store.snapshot(name))],
                checkpoint_id,
                partition="subtask",
            )
            mode = store.mode(name)
            results.append(
                StateSnapshotResult(
                    state=name,
                    schema=schema_to_text(store.schema(name)),
                    descriptor={**store.descriptor(name).describe(), "mode": mode.value},
                    changed_key_groups=(self.subtask_index,),
                    files=files,
                    table_kind="operator",
                    kind=mode.catalog_kind,
                    replace_all=True,
                )
            )
        return results
