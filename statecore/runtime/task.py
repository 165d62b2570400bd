"""One parallel instance of a keyed operator, independent of Spark.

It owns the key groups of its range: it restores them (keyed state lazily through the backend,
timers and operator state when it opens), runs the user function per record with the record's key
made current, fires timers when the watermark or processing time advances, and writes what changed
as snapshot files: the changed key groups of each keyed state and of the timers, and the whole
operator state of its subtask. The Spark runtime runs one per partition; tests and benchmarks run
it in-process.
"""

from __future__ import annotations

import functools
import gc
from collections import namedtuple
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from itertools import chain
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from statecore.backends.base import KeyedStateBackend, snapshot_schema
from statecore.backends.heap import HeapKeyedStateBackend
from statecore.backends.operator import OperatorStateStore
from statecore.backends.timers import Timer, timers_schema
from statecore.errors import ConfigError, StateDescriptorConflictError
from statecore.keygroups import KeyGroupRange, assign_to_key_group
from statecore.runtime.functions import (
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    OnTimerContext,
    RuntimeContext,
)
from statecore.runtime.latency import LatencyTracker, LatencyTracking
from statecore.runtime.restore import RestoredState, RestorePlan
from statecore.runtime.vectorized import KeyedBatch, KeyedBatchFunction, group_by_key
from statecore.snapshot import TIMERS, SnapshotFile, write_key_group_files
from statecore.snapshot.changelog import CHANGES, ChangelogConfig, change_rows, changes_schema
from statecore.types import TypeInfo, schema_to_text

__all__ = [
    "RestorePlan",
    "RestoredState",
    "StateSnapshotResult",
    "StateSchema",
    "KeyedOperatorTask",
    "TableUris",
    "probe_states",
    "table_uri",
]

_GC_BATCH_THRESHOLD = 50_000
"""Allocations between young-generation collections while a batch is processed (default 700)."""

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


@dataclass(frozen=True)
class StateSchema:
    """A state a task registered: its table kind, catalog kind and snapshot schema (as text)."""

    name: str
    table_kind: str
    kind: str
    schema: str


def table_uri(table_uris: TableUris, table_kind: str, state: str) -> str:
    """The URI of one table of ``table_kind`` (keyed, operator or timers) and ``state``."""
    if callable(table_uris):
        return table_uris(table_kind, state)
    return table_uris[state]


def event_time_millis(column: pa.ChunkedArray | pa.Array) -> list[int | None]:
    """Epoch milliseconds of a timestamp column (an integer column is taken as milliseconds)."""
    if pa.types.is_timestamp(column.type):
        column = pc.cast(
            pc.cast(column, pa.timestamp("ms", column.type.tz), safe=False), pa.int64()
        )  # sub-millisecond precision is truncated
    elif not pa.types.is_integer(column.type):
        raise ConfigError(
            f"an event-time column must be a timestamp or epoch milliseconds, not {column.type}"
        )
    return column.to_pylist()  # type: ignore[no-any-return]


class KeyedOperatorTask:
    """Runs ``function`` over records of its key groups with ``backend``.

    ``restore`` (when given) brings back the timers of the backend's key groups and this
    subtask's share of operator state; keyed state is restored by the backend's restore source.
    A task continuing the previous run's state in this process (:mod:`statecore.runtime.warm`)
    passes that run's ``operator_state`` (``None``: restored from ``restore``) and
    ``restore_timers=False`` (the backend holds them).
    """

    def __init__(
        self,
        function: KeyedProcessFunction | KeyedBatchFunction,
        backend: KeyedStateBackend,
        *,
        job: str,
        operator: str,
        subtask_index: int,
        parallelism: int,
        restore: RestorePlan | None = None,
        changelog: ChangelogConfig | None = None,
        operator_state: OperatorStateStore | None = None,
        restore_timers: bool = True,
        latency: LatencyTracking | None = None,
    ) -> None:
        self.function = function
        self.backend = backend
        self.changelog = changelog
        if changelog is not None:
            backend.enable_change_tracking()
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.restore = restore or RestorePlan(job, operator)
        self.tracker = None if latency is None else LatencyTracker(latency)
        """Samples state-access latencies when ``latency`` is given (see :mod:`.latency`)."""
        self.runtime_context = RuntimeContext(
            backend,
            job=job,
            operator=operator,
            subtask_index=subtask_index,
            parallelism=parallelism,
            tracker=self.tracker,
        )
        self.operator_state = operator_state or OperatorStateStore(
            restored=self.restore.operator_state(subtask_index, parallelism)
        )
        self.restore_timers = restore_timers
        self.context = Context(backend)
        self.timer_context = OnTimerContext(backend)
        self.records = 0
        self._record_types: dict[tuple[str, ...], type] = {}

    def open(self) -> None:
        backend, restore = self.backend, self.restore
        if self.restore_timers:
            for key_group, rows in restore.timer_rows(backend.key_group_range, backend.key_type):
                backend.timer_service.restore_key_group(key_group, rows)
        if isinstance(self.function, CheckpointedFunction):
            self.function.initialize_state(
                FunctionInitializationContext(
                    is_restored=restore.is_restored,
                    operator_state_store=self.operator_state,
                    keyed_state_store=self.runtime_context,
                )
            )
        self.function.open(self.runtime_context)
        keyed, operator = set(backend.descriptors), set(self.operator_state.state_names)
        if keyed & operator:
            raise StateDescriptorConflictError(
                f"operator {restore.operator!r}: {sorted(keyed & operator)} registered both as "
                "keyed and as operator state"
            )
        if TIMERS in keyed | operator:
            raise ConfigError(
                f"operator {restore.operator!r}: the state name {TIMERS!r} is "
                "reserved for the operator's timers"
            )

    def registered_states(self) -> list[StateSchema]:
        """Every state registered by ``open()``, and the timers (for schema checks)."""
        backend, store = self.backend, self.operator_state
        out = [
            StateSchema(
                name, "keyed", d.kind.value, schema_to_text(snapshot_schema(backend.key_type, d))
            )
            for name, d in backend.descriptors.items()
        ]
        out += [
            StateSchema(
                name, "operator", store.mode(name).catalog_kind, schema_to_text(store.schema(name))
            )
            for name in store.state_names
        ]
        out.append(
            StateSchema(TIMERS, TIMERS, TIMERS, schema_to_text(timers_schema(backend.key_type)))
        )
        return out

    # -- records ---------------------------------------------------------------------------
    def process(
        self,
        records: Iterable[tuple[Any, int | None, Any]],
        timestamps: Iterable[int | None] | None = None,
    ) -> list[Any]:
        """Process ``(key, key_group, record)`` triples; the outputs, in order.

        ``timestamps`` (epoch ms, one per record) become ``ctx.timestamp``.
        """
        out: list[Any] = []
        if timestamps is None:
            self.records += self._loop(records, out)
        else:
            self.records += self._loop_with_timestamps(zip(records, timestamps), out)
            self.context.timestamp = None
        return out

    def _loop(self, records: Iterable[tuple[Any, int | None, Any]], out: list[Any]) -> int:
        extend = out.extend
        set_key = self.backend.set_current_key
        process = self._per_record_function().process_element
        ctx = self.context
        tracker, sample_at, interval = self._sampling()
        n = 0
        for key, key_group, record in records:
            set_key(key, key_group)
            ctx.current_key = key
            if n == sample_at:
                sample_at += interval
                tracker.sample(process, record, ctx, extend)  # type: ignore[union-attr]
            else:
                result = process(record, ctx)
                if result is not None:
                    extend(result)
            n += 1
        self._sampled_up_to(sample_at, n)
        return n

    def _loop_with_timestamps(
        self, records: Iterable[tuple[tuple[Any, int | None, Any], int | None]], out: list[Any]
    ) -> int:
        extend = out.extend
        set_key = self.backend.set_current_key
        process = self._per_record_function().process_element
        ctx = self.context
        tracker, sample_at, interval = self._sampling()
        n = 0
        for (key, key_group, record), timestamp in records:
            set_key(key, key_group)
            ctx.current_key = key
            ctx.timestamp = timestamp
            if n == sample_at:
                sample_at += interval
                tracker.sample(process, record, ctx, extend)  # type: ignore[union-attr]
            else:
                result = process(record, ctx)
                if result is not None:
                    extend(result)
            n += 1
        self._sampled_up_to(sample_at, n)
        return n

    def _sampling(self) -> tuple[LatencyTracker | None, int, int]:
        """The tracker, the loop's index of the next sampled record (-1: none) and the
        interval; a loop compares its count with the index, the only cost of tracking for an
        unsampled record (see :mod:`.latency`)."""
        tracker = self.tracker
        if tracker is None:
            return None, -1, 0
        return tracker, tracker.until_next, tracker.tracking.sample_interval

    def _sampled_up_to(self, sample_at: int, n: int) -> None:
        """After a loop of ``n`` records: how many records the next sampled one is away."""
        if self.tracker is not None:
            self.tracker.until_next = sample_at - n

    def _per_record_function(self) -> KeyedProcessFunction:
        if not isinstance(self.function, KeyedProcessFunction):
            raise ConfigError(
                f"{type(self.function).__name__} is a KeyedBatchFunction; run it "
                "per batch (process_keyed_table)"
            )
        return self.function

    def process_batch(
        self, batch: pa.RecordBatch, *, key: str, key_group: str, event_time: str | None = None
    ) -> list[Any]:
        """Process an Arrow batch; each record is a namedtuple of its columns (key included).

        The key groups (computed by Spark) are range-checked once per batch; then, when the
        backend switches keys by plain assignment (heap, no per-record TTL cleanup), the loop
        makes each key current without a call. Python's cyclic garbage collector runs less
        often meanwhile: every record allocates short-lived tuples, which would otherwise make
        it rescan the (large, long-lived) state every few hundred records.
        """
        thresholds = gc.get_threshold()
        gc.set_threshold(max(thresholds[0], _GC_BATCH_THRESHOLD), *thresholds[1:])
        try:
            return self._process_batch(batch, key=key, key_group=key_group, event_time=event_time)
        finally:
            gc.set_threshold(*thresholds)

    def _process_batch(
        self, batch: pa.RecordBatch, *, key: str, key_group: str, event_time: str | None
    ) -> list[Any]:
        names = [n for n in batch.schema.names if n != key_group]
        row = self._record_type(names)
        columns = [batch.column(n).to_pylist() for n in names]
        records = map(functools.partial(tuple.__new__, row), zip(*columns))
        keys = columns[names.index(key)] if key in names else batch.column(key).to_pylist()
        groups = batch.column(key_group)
        if groups.null_count == 0:
            self._check_key_groups(groups, keys)
        key_groups = groups.to_pylist()
        backend = self.backend
        if event_time is not None:
            return self.process(
                zip(keys, key_groups, records), event_time_millis(batch.column(event_time))
            )
        if groups.null_count or not backend.switches_keys_by_assignment():
            return self.process(zip(keys, key_groups, records))
        out: list[Any] = []
        self.records += self._assigned_loop(zip(keys, key_groups, records), out)
        return out

    def _assigned_loop(self, records: Iterable[tuple[Any, int, Any]], out: list[Any]) -> int:
        """The loop of a backend that switches keys by assignment: no call per key."""
        extend = out.extend
        process = self._per_record_function().process_element
        ctx = self.context
        key_context = self.backend.key_context
        tracker, sample_at, interval = self._sampling()
        n = 0
        for current, current_group, record in records:
            key_context.key = ctx.current_key = current
            key_context.key_group = current_group
            if n == sample_at:
                sample_at += interval
                tracker.sample(process, record, ctx, extend)  # type: ignore[union-attr]
            else:
                result = process(record, ctx)
                if result is not None:
                    extend(result)
            n += 1
        self._sampled_up_to(sample_at, n)
        return n

    def _record_type(self, names: list[str]) -> type:
        """The namedtuple of a batch's columns (made once per distinct column list)."""
        signature = tuple(names)
        if self._record_types.get(signature) is None:
            self._record_types[signature] = namedtuple("Record", names, rename=True)
        return self._record_types[signature]

    def _check_key_groups(self, groups: pa.Array, keys: list[Any]) -> None:
        """Every key group (no nulls) is one of the backend's, else the backend's error for
        the first key outside its range."""
        if len(groups) == 0:
            return
        r = self.backend.key_group_range
        bounds = pc.min_max(groups)
        if r.start <= bounds["min"].as_py() and bounds["max"].as_py() <= r.end:
            return
        for current, current_group in zip(keys, groups.to_pylist()):
            if not r.start <= current_group <= r.end:
                self.backend.set_current_key(current, current_group)  # raises

    def process_keyed_table(
        self, rows: pa.Table | pa.RecordBatch, *, key: str, key_group: str
    ) -> pa.Table | None:
        """Run a :class:`~statecore.runtime.vectorized.KeyedBatchFunction` over ``rows`` grouped by
        ``key`` (the ``key_group`` column is checked and dropped); its output rows."""
        function = self.function
        if not isinstance(function, KeyedBatchFunction):
            raise ConfigError(
                f"{type(function).__name__} is not a KeyedBatchFunction; run a "
                "KeyedProcessFunction per record (process_batch)"
            )
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        if rows.num_rows == 0:
            return None
        keys, first, codes = group_by_key(rows, key)
        groups = rows.column(key_group).combine_chunks().take(first)
        if groups.null_count:  # not computed by Spark: compute them here
            max_parallelism = self.backend.max_parallelism
            groups = pa.array([assign_to_key_group(k, max_parallelism) for k in keys], pa.int32())
        self._check_key_groups(groups, keys)
        batch = KeyedBatch(
            rows.drop_columns([key_group]), keys, groups.to_pylist(), codes, self.backend
        )
        out = function.process_batch(batch)
        self.records += rows.num_rows
        if isinstance(out, pa.RecordBatch):
            out = pa.Table.from_batches([out])
        return out

    # -- timers ----------------------------------------------------------------------------
    def advance_watermark(self, watermark: int) -> list[Any]:
        """Advance the event-time watermark; the outputs of the timers that fired."""
        return self._on_timers(self.backend.timer_service.advance_watermark(watermark))

    def advance_processing_time(self, now: int | None = None) -> list[Any]:
        """Fire the processing-time timers due at ``now`` (default: the backend's clock)."""
        return self._on_timers(self.backend.timer_service.advance_processing_time(now))

    def _on_timers(self, timers: Iterable[Timer]) -> list[Any]:
        out: list[Any] = []
        ctx = self.timer_context
        on_timer = self._per_record_function().on_timer
        for timer in timers:
            ctx.timestamp = timer.timestamp
            ctx.current_key = timer.key
            ctx.time_domain = timer.time_domain
            ctx.namespace = timer.namespace
            result = on_timer(timer.timestamp, ctx)
            if result is not None:
                out.extend(result)
        return out

    # -- checkpoints -----------------------------------------------------------------------
    def snapshot(
        self, table_uris: TableUris, *, checkpoint_id: int, timestamp: int | None = None
    ) -> list[StateSnapshotResult]:
        """Write what changed; what the committer needs, one result per table."""
        if isinstance(self.function, CheckpointedFunction):
            now = self.backend.timer_service.current_processing_time()
            self.function.snapshot_state(
                FunctionSnapshotContext(
                    checkpoint_id=checkpoint_id, timestamp=now if timestamp is None else timestamp
                )
            )
        results = self._snapshot_keyed(table_uris, checkpoint_id)
        results += self._snapshot_timers(table_uris, checkpoint_id)
        results += self._snapshot_operator_state(table_uris, checkpoint_id)
        self.backend.mark_snapshotted()
        self.backend.timer_service.mark_snapshotted()
        self.backend.on_snapshot_written(checkpoint_id, self._written_files(results))
        return results

    def _written_files(self, results: list[StateSnapshotResult]) -> dict[str, dict[int, list[str]]]:
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

    def close(self, *, keep_backend: bool = False) -> None:
        """Close the function, and the backend unless it is ``keep_backend`` (kept warm for
        the next run)."""
        self.function.close()
        if not keep_backend:
            self.backend.close()


def probe_states(
    function: KeyedProcessFunction | KeyedBatchFunction,
    key_type: TypeInfo,
    *,
    job: str,
    operator: str,
    parallelism: int,
    max_parallelism: int,
) -> list[StateSchema]:
    """Initialize and open ``function`` (a copy: it keeps the handles) against empty state:
    the states it registers, for the driver's schema check before any record is processed."""
    backend = HeapKeyedStateBackend(
        key_type=key_type, key_group_range=KeyGroupRange.empty(), max_parallelism=max_parallelism
    )
    task = KeyedOperatorTask(
        function, backend, job=job, operator=operator, subtask_index=0, parallelism=parallelism
    )
    task.open()
    try:
        return task.registered_states()
    finally:
        task.close()
