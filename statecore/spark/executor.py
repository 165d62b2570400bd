"""Executor side of ``keyed_process``: what runs in each Spark task's Python worker.

A task restores its key-group range, runs the operator over its partition's Arrow batches, writes
its snapshot files and reports them (as a JSON row) to the driver, which commits. This module
keeps the worker's imports to the state runtime: the catalog (SQLAlchemy) and the planning code
stay on the driver, so a cold Python worker starts in a fraction of a second.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any, TypeAlias

import pyarrow as pa
from pyspark import TaskContext

from statecore.backends import BackendParameters, KeyedStateBackend, TaskScope, create_backend
from statecore.backends.operator import OperatorStateStore
from statecore.backends.timers import MIN_WATERMARK, TimeDomain
from statecore.errors import ConfigError, KeyTypeError, StateDescriptorConflictError
from statecore.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from statecore.runtime.collector import task_gc_policy
from statecore.runtime.latency import LatencyTracking
from statecore.runtime.lateness import EventTimeGate, LateData
from statecore.runtime.live import LIVE
from statecore.runtime.restore import RestorePlan, TaskFiles, fingerprint
from statecore.runtime.shares import TaskShares
from statecore.runtime.task import KeyedOperatorTask, TableUris
from statecore.runtime.warm import WARM_POOL, RunClock, WarmEntry, WarmScope, snapshot_token
from statecore.snapshot.changelog import ChangelogConfig
from statecore.snapshot.faults import fault_point
from statecore.snapshot.output import OutputWriter
from statecore.spark.host import hosted, hosting
from statecore.spark.named_outputs import LATE_DATA, SIDE_OUTPUT, NamedOutput
from statecore.spark.task_timing import TaskTiming
from statecore.ttl.time import TtlTimeProvider
from statecore.types import TypeInfo

__all__ = [
    "LATE_DATA",
    "META",
    "NamedOutput",
    "SIDE_OUTPUT",
    "TaskSpec",
    "task_function",
    "run_task",
    "per_record",
    "per_batch",
    "output_batches",
    "to_batch",
    "table_batches",
]

META = "__statecore_snapshot"
"""The extra output column through which each task reports its snapshot to the driver."""


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """Everything a task needs besides its records (pickled once per job to the executors)."""

    key: str
    key_type: TypeInfo
    key_group_column: str
    parallelism: int
    max_parallelism: int
    checkpoint_id: int
    restore: TaskShares
    """The restore plan, cut into each subtask's part on the driver (:meth:`restore_plan`)."""
    job: str
    operator: str
    backend_parameters: BackendParameters
    home: str
    table_uris: TableUris
    output_schema: pa.Schema
    event_time: str | None
    watermark: int
    """The watermark the task advances to after its records (its timers up to it fire)."""
    processing_time: TtlTimeProvider | None
    processing_timers_at_end: bool = False
    """Every processing-time timer fires at the end of the run (Flink's BATCH end of input)."""
    output_table: str | None = None
    """When set, tasks write their output there (committed by the driver) instead of
    returning it to Spark."""
    changelog: ChangelogConfig | None = None
    """When set, tasks write changelog checkpoints (:mod:`statecore.snapshot.changelog`)."""
    latency: LatencyTracking | None = None
    """State-access latency tracking (off when ``None``)."""
    start_watermark: int = MIN_WATERMARK
    """The watermark of the restored checkpoint: the task advances to it before its records
    (its timers up to it fire), and records at or below it are late."""
    lateness_ms: int | None = None
    """With ``event_time``: the allowed lateness; the watermark advances between records to the
    largest event time seen minus it minus 1 ms (``None``: only at the end of the run)."""
    late_data: LateData = LateData.PROCESS
    """What the task does with late records (:class:`~statecore.runtime.lateness.LateData`)."""
    output_staging: str | None = None
    """Where tasks write their output files until the checkpoint's commit puts them into
    ``output_table`` (:mod:`statecore.snapshot.output_staging`)."""
    named_outputs: tuple[NamedOutput, ...] = ()
    """The further output tables: the side outputs' and, with ``late_data`` ``table``, the
    late-data table (:data:`LATE_DATA`), each written and committed as the output table is."""
    dropped_side_outputs: frozenset[str] = frozenset()
    """Side outputs whose values the user asked to drop."""

    @property
    def accepted_side_outputs(self) -> frozenset[str]:
        """The side output names a function may emit to in this run."""
        return self.dropped_side_outputs | {
            o.name for o in self.named_outputs if o.kind == SIDE_OUTPUT
        }

    @property
    def result_schema(self) -> pa.Schema:
        return self.output_schema.append(pa.field(META, pa.string()))

    keep_warm: bool = True
    """Whether tasks keep their state in the Python worker for the next run, and take what the
    last run kept there when it is exactly the restored checkpoint (see
    :mod:`statecore.runtime.warm`)."""
    warm_host: bool = False
    """With ``keep_warm``: whether tasks run in their subtask's warm state host instead of the
    Python worker Spark picked (:mod:`statecore.spark.host`; a stream's runs)."""
    host_stop_marker: str | None = None
    """With ``warm_host``: where the stream's query, once stopped, leaves the marker that makes
    its hosts on every machine exit (:mod:`statecore.spark.host_stop`)."""
    live_token: str | None = None
    """When set (and ``keep_warm``), tasks serve live lookups of their state with this token
    (see :mod:`statecore.runtime.live`)."""

    def key_groups(self, index: int) -> KeyGroupRange:
        return compute_key_group_range_for_operator_index(
            self.max_parallelism, self.parallelism, index
        )

    def restore_plan(self, index: int) -> RestorePlan:
        """What operator instance ``index`` restores: only its part of the plan."""
        return self.restore.share(index)

    def task_scope(self, index: int) -> TaskScope:
        """Where operator instance ``index`` runs and what it restores (for the backend)."""
        restore, key_type = self.restore_plan(index), self.key_type
        key_groups = self.key_groups(index)
        return TaskScope(
            job=self.job,
            operator=self.operator,
            subtask_index=index,
            checkpoint_id=self.checkpoint_id,
            home=self.home,
            restored_checkpoint_id=restore.checkpoint_id,
            restored_files=restore.file_paths(key_groups),
            restore_source_for=lambda kgs: restore.source(kgs, key_type),
        )

    def is_stale(self, entry: WarmEntry) -> bool:
        """Whether a kept entry (of another subtask) can no longer be taken: snapshotted by an
        earlier run, and not the checkpoint this run restores (a later one of its subtask was
        completed by another worker, or its own failed)."""
        scope = entry.scope
        plan = self.restore.plan_for(scope.key_groups, scope.subtask_index)
        return entry.checkpoint_id < self.checkpoint_id and entry.token != plan.fingerprint(
            scope.key_groups, scope.subtask_index
        )

    def warm_scope(self, index: int) -> WarmScope:
        return WarmScope(
            job=self.job,
            operator=self.operator,
            subtask_index=index,
            parallelism=self.parallelism,
            key_groups=self.key_groups(index),
            max_parallelism=self.max_parallelism,
            key_type=self.key_type,
            backend=self.backend_parameters,
            changelog=self.changelog is not None,
        )

    def backend(self, index: int, clock: RunClock | None = None) -> KeyedStateBackend:
        """The backend of operator instance ``index``, restored lazily from the plan."""
        key_groups = self.key_groups(index)
        return create_backend(
            self.backend_parameters,
            key_type=self.key_type,
            key_group_range=key_groups,
            max_parallelism=self.max_parallelism,
            restore_source=self.restore_plan(index).source(key_groups, self.key_type),
            ttl_time_provider=clock or self.processing_time,
            scope=self.task_scope(index),
        )


Output: TypeAlias = list[Any] | pa.Table | None
"""What a task produces at a time: rows (tuples in the output schema's order) or a table."""

Process = Callable[[KeyedOperatorTask, Iterator[pa.RecordBatch]], Iterator[Output]]
"""Runs a task over its batches (after ``open``), yielding output as it goes."""


def per_record(spec: TaskSpec) -> Process:
    """Each record through ``process_element`` (with an event time, in event-time order and
    the watermark advancing between records, firing the timers it passes), then the timers due
    at the end of the run."""

    def process(task: KeyedOperatorTask, batches: Iterator[pa.RecordBatch]) -> Iterator[Output]:
        yield task.advance_watermark(spec.start_watermark)
        for batch in batches:
            yield task.process_batch(
                batch,
                key=spec.key,
                key_group=spec.key_group_column,
                event_time=spec.event_time,
                lateness_ms=spec.lateness_ms,
            )
        out = task.advance_watermark(spec.watermark) + task.advance_processing_time()
        if spec.processing_timers_at_end:
            out += task.fire_processing_timers()
        yield out

    return process


def per_batch(spec: TaskSpec, batch_rows: int) -> Process:
    """Spark's Arrow batches gathered into keyed batches of up to ``batch_rows`` rows, each
    through ``process_batch`` of a ``KeyedBatchFunction`` (state once per key and batch)."""

    def process(task: KeyedOperatorTask, batches: Iterator[pa.RecordBatch]) -> Iterator[Output]:
        pending: list[pa.RecordBatch] = []
        rows = 0
        for batch in chain(batches, [None]):  # None: the end, process what is pending
            if batch is not None:
                pending.append(batch)
                rows += batch.num_rows
            if pending and (batch is None or rows >= batch_rows):
                yield task.process_keyed_table(
                    pa.Table.from_batches(pending), key=spec.key, key_group=spec.key_group_column
                )
                pending, rows = [], 0

    return process


def task_function(
    spec: TaskSpec,
    function: Any,
    process: Process,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of one run: :func:`run_task` as the task's partition."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        index = TaskContext.get().partitionId()  # type: ignore[union-attr]
        with task_gc_policy():  # once per task, restore (or the hand-over) included
            if spec.warm_host and spec.keep_warm and hosting():
                yield from hosted(spec, function, process, index, batches, run_task)
            else:
                yield from run_task(spec, function, process, index, batches)

    return run


def run_task(
    spec: TaskSpec,
    function: Any,
    process: Process,
    index: int,
    batches: Iterator[pa.RecordBatch],
    handover_s: float = 0.0,
    handover_cpu_s: float = 0.0,
) -> Iterator[pa.RecordBatch]:
    """Operator instance ``index`` over ``batches``: take the state this process kept from the
    last run or restore it, ``process``, snapshot, keep the state, report (output rows, then
    one row whose :data:`META` column is the JSON report). ``handover_s``: the time the task
    took to reach this process (a warm state host, :mod:`statecore.spark.host`), counted in
    the time it took to get its state (``acquire_s``); ``handover_cpu_s``: the CPU time of it,
    counted in ``acquire_cpu_s`` (the CPU time the task's thread spent getting its state: the
    rest of ``acquire_s`` it waited for a core, or for a restore's reader threads)."""
    started, started_cpu = time.perf_counter(), time.thread_time()
    state = _TaskState.take(spec, index)
    task = state.opened_task(spec, function, index)  # restored (or kept), opened
    acquire_s = handover_s + time.perf_counter() - started
    acquire_cpu_s = handover_cpu_s + time.thread_time() - started_cpu
    backend = task.backend
    restore_timing = (
        None  # a kept state reads nothing: no sample for the restore-time estimates
        if state.warm is not None
        else spec.restore_plan(index).restore_timing(
            backend.key_group_range, index, time.perf_counter() - started
        )
    )
    try:
        held, live_address = _serve_live(spec, index, backend, state)
    except BaseException:
        backend.close()  # e.g. no address to bind: the task fails, its local state released
        raise
    result_schema = spec.result_schema
    writer = (
        None
        if spec.output_table is None
        else OutputWriter(
            spec.output_table,
            spec.output_schema,
            checkpoint_id=spec.checkpoint_id,
            subtask=index,
            staging=spec.output_staging,
        )
    )
    named = {o.name: (o, o.writer(spec.checkpoint_id, index)) for o in spec.named_outputs}
    late_writer = named[LATE_DATA][1] if LATE_DATA in named else None
    side_outputs = task.side_outputs
    side_outputs.accepted = spec.accepted_side_outputs
    gate = EventTimeGate(
        spec.event_time,
        watermark=spec.start_watermark,
        on_late=None if late_writer is None else functools.partial(_write_late, late_writer),
        keep_late=spec.late_data is LateData.PROCESS,
    )
    if held is not None:  # a live read and the processing of a batch exclude each other
        task.batch_guard = held.lock
    timing = TaskTiming()
    outputs = process(task, gate.on_time(_with_keys(timing.inputs(batches), spec)))
    try:
        loop_started = time.perf_counter()
        for output in outputs:
            fault_point("task:process")
            for batch in output_batches(output, spec.output_schema):
                if writer is not None:
                    written_started = time.perf_counter()
                    writer.write(batch)
                    timing.output_write_s += time.perf_counter() - written_started
                else:
                    yield pa.RecordBatch.from_arrays(
                        [*batch.columns, pa.nulls(batch.num_rows, pa.string())],
                        schema=result_schema,
                    )
            _write_side_outputs(side_outputs.drain(), named)
        timing.loop_s = time.perf_counter() - loop_started
        with task.batch_guard:
            snapshot = task.snapshot(spec.table_uris, checkpoint_id=spec.checkpoint_id)
        written = None if writer is None else writer.close()
        timing.snapshot_s = time.perf_counter() - loop_started - timing.loop_s
        closed = {o.report_key: w.close() for o, w in named.values()}
        restored = {**backend.restore_metrics(), **state.metrics()}
        next_timer = backend.timer_service.next_timestamp(TimeDomain.PROCESSING_TIME)
    except BaseException:
        LIVE.release(backend)
        backend.close()  # a failed attempt must not keep its local state open
        for w in (writer, *(w for _, w in named.values())):
            if w is not None:
                w.abort()
        raise
    state.keep(spec, task, snapshot)
    if held is not None:
        LIVE.snapshotted(held, spec.checkpoint_id)
    meta = json.dumps(
        {
            "job": spec.job,
            "operator": spec.operator,
            "checkpoint_id": spec.checkpoint_id,
            "subtask": index,
            "records": task.records,
            "restore": restored,
            "restore_timing": restore_timing,
            "acquire_s": acquire_s,
            "acquire_cpu_s": acquire_cpu_s,
            "timing": timing.to_json_dict(),
            "latency": None if task.tracker is None else task.tracker.report(),
            "states": [s.to_json_dict() for s in snapshot],
            "output": None if written is None else written.to_json_dict(),
            "max_event_time": gate.max_event_time,
            "late_rows": gate.late_rows,
            **{k: None if f is None else f.to_json_dict() for k, f in closed.items()},
            "next_processing_timer": next_timer,
            "live": live_address,
        }
    )
    columns: list[Any] = [pa.nulls(1, f.type) for f in spec.output_schema]
    columns.append(pa.array([meta]))
    yield pa.RecordBatch.from_arrays(columns, schema=result_schema)


def _serve_live(
    spec: TaskSpec, index: int, backend: KeyedStateBackend, state: _TaskState
) -> tuple[Any, str | None]:
    """The task's state served to live lookups, and the address (``None``, ``None``: off)."""
    if spec.live_token is None or not spec.keep_warm:
        return None, None
    return LIVE.hold(
        job=spec.job,
        operator=spec.operator,
        subtask=index,
        key_groups=state.scope.key_groups,
        token=spec.live_token,
        backend=backend,
        checkpoint_id=(
            state.warm.checkpoint_id if state.warm is not None else spec.restore.checkpoint_id or 0
        ),
    )


@dataclass
class _TaskState:
    """A task's state at its start: kept warm from the last run in this process, or restored."""

    scope: WarmScope
    restored_files: TaskFiles  # the plan's files of this task, for the next token
    clock: RunClock
    warm: WarmEntry | None

    @classmethod
    def take(cls, spec: TaskSpec, index: int) -> _TaskState:
        scope = spec.warm_scope(index)
        files = spec.restore_plan(index).task_files(scope.key_groups, index)
        clock, warm = RunClock(spec.processing_time), None
        if spec.keep_warm:
            warm = WARM_POOL.take(scope, fingerprint(files), spec.is_stale)
            if warm is not None:
                warm.clock.target = clock.target
                clock = warm.clock
        return cls(scope=scope, restored_files=files, clock=clock, warm=warm)

    def opened_task(self, spec: TaskSpec, function: Any, index: int) -> KeyedOperatorTask:
        """The task over the kept state, opened; restored instead when the function's copy
        registers a state differently from the kept one (a changed descriptor)."""
        warm = self.warm
        if warm is not None:
            backend = warm.backend
            backend.resume(
                spec.restore_plan(index).source(self.scope.key_groups, spec.key_type),
                spec.task_scope(index),
            )
            task = self._task(spec, function, index, backend, warm.reusable_operator_state())
            try:
                task.open()
                return task
            except StateDescriptorConflictError:
                self.warm = None
                warm.close()
        task = self._task(spec, function, index, spec.backend(index, self.clock), None)
        try:
            task.open()
        except BaseException:
            task.backend.close()
            raise
        return task

    def _task(
        self,
        spec: TaskSpec,
        function: Any,
        index: int,
        backend: KeyedStateBackend,
        operator_state: OperatorStateStore | None,
    ) -> KeyedOperatorTask:
        return KeyedOperatorTask(
            function,
            backend,
            job=spec.job,
            operator=spec.operator,
            subtask_index=index,
            parallelism=spec.parallelism,
            restore=spec.restore_plan(index),
            changelog=spec.changelog,
            operator_state=operator_state,
            restore_timers=self.warm is None,
            latency=spec.latency,
        )

    def metrics(self) -> dict[str, int]:
        """``warm_tasks`` (1 when the state was kept from the last run) and
        ``warm_key_groups`` (its key groups)."""
        warm = self.warm is not None
        return {
            "warm_tasks": int(warm),
            "warm_key_groups": len(self.scope.key_groups) if warm else 0,
        }

    def keep(self, spec: TaskSpec, task: KeyedOperatorTask, snapshot: list[Any]) -> None:
        """Close the function; keep the state for the next run (or close it)."""
        task.close(keep_backend=spec.keep_warm)
        if not spec.keep_warm:
            return
        WARM_POOL.put(
            WarmEntry(
                scope=self.scope,
                token=snapshot_token(
                    self.restored_files,
                    snapshot,
                    spec.table_uris,
                    self.scope.subtask_index,
                ),
                checkpoint_id=spec.checkpoint_id,
                backend=task.backend,
                operator_state=task.operator_state,
                clock=self.clock,
            )
        )


def _write_side_outputs(
    values: dict[str, list[Any]], named: dict[str, tuple[NamedOutput, OutputWriter]]
) -> None:
    """The values the function emitted to side outputs, each tag's as rows of its table (a
    tag the user asked to drop has no table: its values go)."""
    for name, rows in values.items():
        target = named.get(name)
        if target is None or target[0].kind != SIDE_OUTPUT:
            continue
        output, writer = target
        try:
            batch = to_batch(rows, output.schema)
        except ConfigError as exc:
            raise ConfigError(f"side output {name!r}: {exc}") from exc
        writer.write(batch)


def _write_late(writer: OutputWriter, batch: pa.RecordBatch) -> None:
    """Late records in the input's columns (without the key group Spark added; timestamps in
    UTC, as Spark's are in the session's time zone)."""
    writer.write(
        pa.RecordBatch.from_arrays(
            [batch.column(f.name).cast(f.type) for f in writer.schema], schema=writer.schema
        )
    )


def _with_keys(batches: Iterator[pa.RecordBatch], spec: TaskSpec) -> Iterator[pa.RecordBatch]:
    """The batches, each checked for null keys before any of its records is processed (the
    task then fails, and nothing of the checkpoint commits)."""
    for batch in batches:
        nulls = batch.column(spec.key).null_count
        if nulls:
            raise KeyTypeError(
                f"job {spec.job!r}, operator {spec.operator!r}: the key column {spec.key!r} "
                f"holds {nulls} null key(s); every record needs a key (filter or fill null keys "
                "before keyed_process)"
            )
        yield batch


def output_batches(output: Output, output_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """What a task produced (rows or a table) as batches of the output schema."""
    if isinstance(output, pa.Table):
        yield from table_batches(output, output_schema)
    elif output:
        yield to_batch(output, output_schema)


def to_batch(rows: list[Any], output_schema: pa.Schema) -> pa.RecordBatch:
    """Output rows (tuples in the output schema's field order) as one Arrow batch, built in
    one conversion (a struct array) rather than column by column."""
    try:
        struct = pa.array(rows, type=pa.struct(list(output_schema)))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        names = output_schema.names
        bad = next(
            (r for r in rows if not isinstance(r, tuple | list) or len(r) != len(names)), None
        )
        if bad is not None:
            raise ConfigError(
                f"output row {bad!r} does not have the {len(names)} fields of the "
                f"output schema {names}"
            ) from exc
        raise ConfigError(
            f"output rows do not match the output schema {output_schema}: {exc}"
        ) from exc
    return pa.RecordBatch.from_struct_array(struct)


def table_batches(table: pa.Table, output_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """A vectorized function's output table in the output schema (by column name; extra
    columns dropped), as batches."""
    missing = [n for n in output_schema.names if n not in table.column_names]
    if missing:
        raise ConfigError(
            f"the function's output has no column(s) {missing}; it has "
            f"{table.column_names}, the output schema needs {output_schema.names}"
        )
    try:
        table = table.select(output_schema.names).cast(output_schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise ConfigError(
            f"the function's output {table.schema} does not cast to the output "
            f"schema {output_schema}: {exc}"
        ) from exc
    yield from table.to_batches()
