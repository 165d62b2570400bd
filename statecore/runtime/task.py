"""One parallel instance of a keyed operator, independent of Spark.

It owns the key groups of its range: it restores them (keyed state lazily through the backend,
timers and operator state when it opens), runs the user function per record with the record's key
made current, fires timers when the watermark or processing time advances, and writes what changed
as snapshot files: the changed key groups of each keyed state and of the timers, and the whole
operator state of its subtask. The Spark runtime runs one per partition; tests and benchmarks run
it in-process.
"""

from __future__ import annotations

import contextlib
import functools
from collections import namedtuple
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import replace
from itertools import repeat
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from statecore.backends.base import BatchKeySetter, KeyedStateBackend, snapshot_schema
from statecore.backends.context import KeyContext
from statecore.backends.heap import HeapKeyedStateBackend
from statecore.backends.operator import OperatorStateStore
from statecore.backends.timers import TimeDomain, Timer, timers_schema
from statecore.errors import ConfigError, KeyTypeError, StateDescriptorConflictError
from statecore.keygroups import Key, KeyGroupRange, assign_to_key_group
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
from statecore.runtime.side_outputs import SideOutputs
from statecore.runtime.snapshots import (
    SnapshotWriter,
    StateSchema,
    StateSnapshotResult,
    TableUris,
    table_uri,
)
from statecore.runtime.spellings import PYFLINK_HINTS
from statecore.runtime.vectorized import KeyedBatch, KeyedBatchFunction, group_by_key
from statecore.snapshot import TIMERS
from statecore.snapshot.changelog import ChangelogConfig
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

Row = tuple[Key, "int | None", Any, "int | None"]
"""One record of the record loop: key, key group (``None``: not computed), record, timestamp."""


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
        self.side_outputs = SideOutputs(where=f"job {job!r}, operator {operator!r}")
        """What the function emitted with ``ctx.output`` (both contexts share it): the caller
        drains it after each output it takes."""
        self.context = Context(backend, self.side_outputs)
        self.timer_context = OnTimerContext(backend, self.side_outputs)
        self.records = 0
        self.batch_guard: AbstractContextManager[Any] = contextlib.nullcontext()
        """Held while a batch is processed or timers fire (a live-lookup server's lock, see
        :mod:`statecore.runtime.live`): nothing by default."""
        self._record_types: dict[tuple[str, ...], type] = {}

    def open(self) -> None:
        backend, restore = self.backend, self.restore
        if self.restore_timers:
            for key_group, rows in restore.timer_rows(backend.key_group_range, backend.key_type):
                backend.timer_service.restore_key_group(key_group, rows)
        with PYFLINK_HINTS:
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
        migrated = restore.migrated | restore.migrated_states(self.registered_states())
        if migrated != restore.migrated:  # the next snapshot rewrites them in their new schema
            self.restore = replace(restore, migrated=migrated)

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
        times = repeat(None) if timestamps is None else timestamps
        rows = ((k, g, r, t) for (k, g, r), t in zip(records, times))
        with self.batch_guard, PYFLINK_HINTS:
            return self._run(rows, self._unchecked_setter())

    def _unchecked_setter(self) -> BatchKeySetter:
        """For keys whose groups no one checked (or computed): each record's key made current
        through the backend's ``set_current_key``, which checks (or computes) its group."""
        scratch = KeyContext()
        set_current_key = self.backend.set_current_key

        def make_current() -> None:
            set_current_key(scratch.key, scratch.key_group)

        return BatchKeySetter(scratch, [make_current])

    def _run(
        self,
        rows: Iterable[Row],
        setter: BatchKeySetter,
        lateness_ms: int | None = None,
        prefixes: Iterable[bytes] | None = None,
    ) -> list[Any]:
        """The record loop: each row's key made current as the backend's ``setter`` says,
        ``process_element`` called, its output gathered.

        With ``lateness_ms`` the watermark advances between records: after a record whose
        event time is above the one the watermark stands for (the watermark plus
        ``lateness_ms`` plus 1 ms, so also across batches), the watermark moves to it minus
        ``lateness_ms`` minus 1 ms and the event-time timers up to it fire, before the next
        record. Per record that costs a comparison (and, when the event time rose, an
        assignment and a look at the head of the timer queue); without it, a test of a local.

        ``prefixes`` (one per row, from the backend's :meth:`prefixed_key_setter
        <statecore.backends.base.KeyedStateBackend.prefixed_key_setter>`) are assigned with
        each row's key, before the setter's listeners.
        """
        out: list[Any] = []
        extend = out.extend
        process = self._per_record_function().process_element
        ctx = self.context
        context, listeners = setter
        tracker, sample_at, interval = self._sampling()
        advancing = lateness_ms is not None
        timers = self.backend.timer_service
        heap, delay = timers.event_time_heap(), (lateness_ms or 0) + 1
        latest = timers.watermark + delay  # the largest event time the watermark stands for
        next_prefix = None if prefixes is None else iter(prefixes).__next__
        n = -1
        for n, (key, key_group, record, timestamp) in enumerate(rows):
            context.key = ctx.current_key = key
            context.key_group = key_group
            if next_prefix is not None:
                context.prefix = next_prefix()
            if listeners:
                for listener in listeners:
                    listener()
            ctx.timestamp = timestamp
            if n == sample_at:
                sample_at += interval
                tracker.sample(process, record, ctx, extend)  # type: ignore[union-attr]
            else:
                result = process(record, ctx)
                if result is not None:
                    extend(result)
            if advancing and timestamp is not None and timestamp > latest:
                latest = timestamp
                timers.watermark = watermark = timestamp - delay
                if heap and heap[0][0] <= watermark:
                    extend(self._on_timers(timers.advance_watermark(watermark)))
        n += 1
        ctx.timestamp = None
        self.records += n
        self._sampled_up_to(sample_at, n)
        return out

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
        self,
        batch: pa.RecordBatch,
        *,
        key: str,
        key_group: str,
        event_time: str | None = None,
        lateness_ms: int | None = None,
    ) -> list[Any]:
        """Process an Arrow batch; each record is a namedtuple of its columns (key included).

        The key groups (computed by Spark) are range-checked by the backend once per batch;
        then each record's key is made current as the backend's
        :meth:`~statecore.backends.base.KeyedStateBackend.batch_key_setter` says (heap: by
        assignment, no call per record). The batch runs inside :attr:`batch_guard`.

        With ``event_time`` and ``lateness_ms`` the watermark advances between records, as a
        Flink source's bounded-out-of-orderness watermark does: once a record raised the
        largest event time seen, the event-time timers up to that time minus ``lateness_ms``
        minus 1 ms fire before the next record (see :meth:`_run`).
        """
        nulls = batch.column(key).null_count
        if nulls:  # before any record of the batch changed state
            raise KeyTypeError(
                f"the key column {key!r} holds {nulls} null key(s); every record needs a key "
                "(no record of this batch was processed)"
            )
        names = [n for n in batch.schema.names if n != key_group]
        row = self._record_type(names)
        columns = [batch.column(n).to_pylist() for n in names]
        records = map(functools.partial(tuple.__new__, row), zip(*columns))
        keys = columns[names.index(key)] if key in names else batch.column(key).to_pylist()
        groups = batch.column(key_group)
        backend = self.backend
        prefixes: list[bytes] | None = None
        if groups.null_count == 0:
            backend.check_key_groups(groups, keys)
            prefixed = backend.prefixed_key_setter(batch.column(key), groups)
            if prefixed is None:
                setter = backend.batch_key_setter()
            else:  # RocksDB, string keys: every key's prefix encoded at once
                setter, prefixes = prefixed
        else:  # not computed by Spark: the backend computes them
            setter = self._unchecked_setter()
        times: Iterable[int | None] = (
            repeat(None) if event_time is None else event_time_millis(batch.column(event_time))
        )
        rows: Iterable[Row] = zip(keys, groups.to_pylist(), records, times)
        with self.batch_guard, PYFLINK_HINTS:
            return self._run(rows, setter, None if event_time is None else lateness_ms, prefixes)

    def _record_type(self, names: list[str]) -> type:
        """The namedtuple of a batch's columns (made once per distinct column list)."""
        signature = tuple(names)
        if self._record_types.get(signature) is None:
            self._record_types[signature] = namedtuple("Record", names, rename=True)
        return self._record_types[signature]

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
        self.backend.check_key_groups(groups, keys)
        batch = KeyedBatch(
            rows.drop_columns([key_group]), keys, groups.to_pylist(), codes, self.backend
        )
        with self.batch_guard:
            out = function.process_batch(batch)
        self.records += rows.num_rows
        if isinstance(out, pa.RecordBatch):
            out = pa.Table.from_batches([out])
        return out

    # -- timers ----------------------------------------------------------------------------
    def advance_watermark(self, watermark: int) -> list[Any]:
        """Advance the event-time watermark; the outputs of the timers that fired."""
        with self.batch_guard, PYFLINK_HINTS:
            return self._on_timers(self.backend.timer_service.advance_watermark(watermark))

    def advance_processing_time(self, now: int | None = None) -> list[Any]:
        """Fire the processing-time timers due at ``now`` (default: the backend's clock)."""
        with self.batch_guard, PYFLINK_HINTS:
            return self._on_timers(self.backend.timer_service.advance_processing_time(now))

    def fire_processing_timers(self) -> list[Any]:
        """Fire every processing-time timer registered now, whatever its time (Flink's BATCH
        mode at the end of input): up to the latest one's time, in time order."""
        pending = self.backend.timer_service.timers(TimeDomain.PROCESSING_TIME)
        if not pending:
            return []
        return self.advance_processing_time(pending[-1].timestamp)

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
        self.snapshot_function_state(checkpoint_id=checkpoint_id, timestamp=timestamp)
        writer = SnapshotWriter(
            self.backend, self.operator_state, self.restore, self.changelog, self.subtask_index
        )
        results = writer.write(table_uris, checkpoint_id)
        self.backend.mark_snapshotted()
        self.backend.timer_service.mark_snapshotted()
        self.backend.on_snapshot_written(checkpoint_id, writer.written_files(results))
        return results

    def snapshot_function_state(self, *, checkpoint_id: int, timestamp: int | None = None) -> None:
        """A :class:`CheckpointedFunction`'s ``snapshot_state`` (nothing for other functions),
        as a snapshot begins; ``timestamp`` defaults to the backend's processing time."""
        if isinstance(self.function, CheckpointedFunction):
            now = self.backend.timer_service.current_processing_time()
            with PYFLINK_HINTS:
                self.function.snapshot_state(
                    FunctionSnapshotContext(
                        checkpoint_id=checkpoint_id,
                        timestamp=now if timestamp is None else timestamp,
                    )
                )

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
    the states it registers. For ``statecore preflight`` only: a run never calls the function
    on the driver (its tasks check the states they register, see ``RestorePlan.check_state``)."""
    backend = HeapKeyedStateBackend(
        key_type=key_type, key_group_range=KeyGroupRange.empty(), max_parallelism=max_parallelism
    )
    task = KeyedOperatorTask(
        function, backend, job=job, operator=operator, subtask_index=0, parallelism=parallelism
    )
    try:
        task.open()
        return task.registered_states()
    finally:
        task.close()
