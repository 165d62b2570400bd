"""One parallel instance of a keyed operator, independent of Spark.

It owns the key groups of its range: it restores them, runs the user function per record with the
record's key made current, and writes the key groups that changed as snapshot files. The Spark
runtime runs one per partition; tests and benchmarks run it in-process.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from statecore.backends.base import KeyedStateBackend, snapshot_schema
from statecore.descriptors import StateDescriptor
from statecore.errors import StateMigrationError
from statecore.keygroups import KeyGroupRange
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.snapshot import SnapshotFile, SnapshotTable, write_key_group_file
from statecore.snapshot.table import TableFile
from statecore.types import schema_to_text

__all__ = ["RestorePlan", "StateSnapshotResult", "KeyedOperatorTask"]


@dataclass(frozen=True)
class RestoredState:
    uri: str
    schema: str  # schema_to_text of the stored rows
    files: tuple[TableFile, ...]


@dataclass(frozen=True)
class RestorePlan:
    """What a task restores: per state, the files of the checkpoint being restored."""

    job: str
    operator: str
    checkpoint_id: int | None = None
    states: dict[str, RestoredState] = field(default_factory=dict)

    def source(self, key_groups: KeyGroupRange, key_type: Any) -> Any:
        """A ``RestoreSource`` reading only ``key_groups``, after checking each state's schema."""

        def read(descriptor: StateDescriptor) -> Iterator[tuple[int, pa.Table]]:
            restored = self.states.get(descriptor.name)
            if restored is None:
                return iter(())
            expected = snapshot_schema(key_type, descriptor)
            if schema_to_text(expected) != restored.schema:
                from statecore.types import schema_from_text

                raise StateMigrationError(
                    f"job {self.job!r}, operator {self.operator!r}, state {descriptor.name!r}: "
                    f"stored schema {schema_from_text(restored.schema)} is not compatible with "
                    f"the descriptor's {expected} (checkpoint {self.checkpoint_id})"
                )
            mine = [f for f in restored.files if f.key_group in key_groups]
            table = SnapshotTable(restored.uri, expected, label=f"{self.job}/{self.operator}/"
                                  f"{descriptor.name}")
            return table.read_files(mine)

        return read


@dataclass(frozen=True)
class StateSnapshotResult:
    """What a task reports to the committer for one state."""

    state: str
    schema: str
    descriptor: dict[str, Any]
    changed_key_groups: tuple[int, ...]
    files: tuple[SnapshotFile, ...]

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
        )


class KeyedOperatorTask:
    """Runs ``function`` over records of its key groups with ``backend``."""

    def __init__(
        self,
        function: KeyedProcessFunction,
        backend: KeyedStateBackend,
        *,
        job: str,
        operator: str,
        subtask_index: int,
        parallelism: int,
    ) -> None:
        self.function = function
        self.backend = backend
        self.subtask_index = subtask_index
        self.runtime_context = RuntimeContext(
            backend, job=job, operator=operator, subtask_index=subtask_index,
            parallelism=parallelism,
        )
        self.context = Context(backend)
        self.records = 0

    def open(self) -> None:
        self.function.open(self.runtime_context)

    def process(self, records: Iterable[tuple[Any, int | None, Any]]) -> list[Any]:
        """Process ``(key, key_group, record)`` triples; the outputs, in order."""
        out: list[Any] = []
        set_key = self.backend.set_current_key
        process = self.function.process_element
        ctx = self.context
        n = 0
        for key, key_group, record in records:
            set_key(key, key_group)
            result = process(record, ctx)
            if result is not None:
                out.extend(result)
            n += 1
        self.records += n
        return out

    def process_batch(self, batch: pa.RecordBatch, *, key: str, key_group: str) -> list[Any]:
        """Process an Arrow batch; each record is a namedtuple of its columns (key included)."""
        names = [n for n in batch.schema.names if n != key_group]
        row = namedtuple("Record", names, rename=True)  # type: ignore[misc]
        columns = [batch.column(n).to_pylist() for n in names]
        records = map(row._make, zip(*columns))
        return self.process(zip(batch.column(key).to_pylist(),
                                batch.column(key_group).to_pylist(), records))

    def snapshot(self, table_uris: dict[str, str], *, checkpoint_id: int) -> list[StateSnapshotResult]:
        """Write every changed key group of every state; what the committer needs."""
        results = []
        backend = self.backend
        for name, descriptor in backend.descriptors.items():
            changed = sorted(backend.changed_key_groups(name))
            files = []
            for kg in changed:
                rows = backend.snapshot_key_group(name, kg)
                if rows.num_rows:
                    files.append(write_key_group_file(
                        table_uris[name], kg, rows, checkpoint_id=checkpoint_id,
                        subtask=self.subtask_index,
                    ))
            results.append(StateSnapshotResult(
                state=name,
                schema=schema_to_text(snapshot_schema(backend.key_type, descriptor)),
                descriptor=descriptor.describe(),
                changed_key_groups=tuple(changed),
                files=tuple(files),
            ))
        backend.mark_snapshotted()
        return results

    def close(self) -> None:
        self.function.close()
        self.backend.close()
