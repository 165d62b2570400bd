"""``keyed_process``: run a ``KeyedProcessFunction`` over a DataFrame as one checkpoint.

One run restores the last completed checkpoint for each task's key-group range, processes every
record, fires the timers that came due, snapshots what changed, commits and completes the
checkpoint. A batch job calls it once per logical date; a Structured Streaming job calls it from
``foreachBatch`` with the micro-batch id as ``checkpoint_id``, so a replayed micro-batch is a no-op.

The event-time watermark belongs to the checkpoint (``CheckpointRecord.watermark``): a run starts
from the watermark of the checkpoint it restores (every task advances to it before its records,
firing the event-time timers up to it; records at or below it are late, see
:mod:`statecore.runtime.lateness`), and completes with a watermark never below it. A batch run
then advances, at the end of the run, to the largest event time of its input minus
``allowed_lateness`` (computed on the driver, the same for every task) and fires the timers up to
it. A micro-batch of a stream (:mod:`statecore.spark.stream`) follows Spark's rule instead: it
runs entirely at the restored watermark, and its checkpoint completes with the watermark its
tasks' event times allow (see :func:`next_watermark`), which the next micro-batch starts from.
Processing-time timers due by the end of a run fire in it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pyspark import StorageLevel, cloudpickle
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from statecore import errors
from statecore.backends.registry import BackendParameters
from statecore.backends.timers import MIN_WATERMARK
from statecore.catalog import (
    RUN_OPERATION,
    Catalog,
    CheckpointRecord,
    CheckpointStatus,
    LiveEndpoint,
)
from statecore.checkpoint.coordinator import CheckpointCoordinator, PlannedCheckpoint
from statecore.checkpoint.lock import hold_lease
from statecore.checkpoint.retain import retain_checkpoints
from statecore.config import StatecoreConfig, check_name
from statecore.errors import ConfigError
from statecore.keygroups import compute_default_max_parallelism
from statecore.ops.savepoint import restore_savepoint
from statecore.runtime.functions import KeyedProcessFunction
from statecore.runtime.latency import LatencyTracking, latency_percentiles
from statecore.runtime.task import StateSchema, StateSnapshotResult, probe_states
from statecore.runtime.vectorized import KeyedBatchFunction
from statecore.snapshot import state_table_uri
from statecore.snapshot.changelog import ChangelogConfig
from statecore.snapshot.output import OutputFile, OutputTable
from statecore.spark.executor import (
    META,
    Process,
    TaskSpec,
    per_batch,
    per_record,
    task_function,
)
from statecore.spark.identity import input_identity
from statecore.spark.partitioning import KEY_GROUP_COLUMN, align_to_key_groups, key_column
from statecore.ttl.time import TtlTimeProvider
from statecore.types import TypeInfo

__all__ = ["KeyedJob", "KeyedRun", "keyed_process", "keyed_process_batches", "next_watermark"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyedRun:
    """The outcome of one run: its output rows, the completed checkpoint, whether it replayed."""

    read_output: Callable[[], DataFrame] = field(repr=False)
    """Builds :attr:`output` (when first asked for: a stream's micro-batch never reads it)."""
    checkpoint: CheckpointRecord
    replayed: bool
    records: int
    restore: dict[str, int] = field(default_factory=dict)
    """Summed over tasks: how the backends got their state (e.g. ``reused_key_groups``,
    ``ingested_rows``), and ``tasks``."""
    late_rows: int = 0
    """Records at or below the watermark the run started from: written to the late-data table,
    or dropped (Spark's ``numRowsDroppedByWatermark``)."""
    next_processing_timer: int | None = None
    """When the earliest pending processing-time timer is due (epoch ms; ``None``: none, or
    not known on a replay)."""
    persisted: DataFrame | None = field(default=None, repr=False)
    """The persisted result the output is read from (without an output table)."""

    @functools.cached_property
    def output(self) -> DataFrame:
        """The run's output rows: Spark's result (persisted; :meth:`unpersist` it when done),
        or with an output table this checkpoint's rows read from the table."""
        return self.read_output()

    def unpersist(self) -> None:
        """Release the persisted result (``output.unpersist()`` would not: the output is a
        projection of it, which Spark's cache does not match)."""
        if self.persisted is not None:
            self.persisted.unpersist()

    @property
    def watermark(self) -> int | None:
        """The event-time watermark (epoch ms) the checkpoint completed with."""
        return self.checkpoint.watermark


def _key_info(df: DataFrame, key: str) -> TypeInfo:
    key_column(df, key)  # raises KeyTypeError for unsupported types
    data_type = df.schema[key].dataType
    if isinstance(data_type, T.StringType):
        return TypeInfo.of(str)
    if isinstance(data_type, T.BinaryType):
        return TypeInfo.of(bytes)
    return TypeInfo.of(int)


def _probe_states(
    function: KeyedProcessFunction | KeyedBatchFunction,
    key_type: TypeInfo,
    planned: PlannedCheckpoint,
    job: str,
    operator: str,
) -> list[StateSchema]:
    """The states a copy of the function registers (the function itself ships untouched)."""
    probe: KeyedProcessFunction | KeyedBatchFunction = cloudpickle.loads(
        cloudpickle.dumps(function)  # type: ignore[no-untyped-call]
    )
    return probe_states(
        probe,
        key_type,
        job=job,
        operator=operator,
        parallelism=planned.parallelism,
        max_parallelism=planned.max_parallelism,
    )


def _event_time_column(df: DataFrame, event_time: str) -> Column:
    """The event-time column as epoch milliseconds; :class:`ConfigError` if it is missing or
    neither a timestamp nor an integer."""
    if event_time not in df.columns:
        raise ConfigError(f"event-time column {event_time!r} is not in {df.columns}")
    data_type = df.schema[event_time].dataType
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
        return F.unix_millis(F.col(event_time).cast("timestamp"))
    if isinstance(data_type, T.LongType | T.IntegerType):
        return F.col(event_time)
    raise ConfigError(
        f"event-time column {event_time!r} has type "
        f"{data_type.simpleString()}; use a timestamp or epoch milliseconds"
    )


def _lateness_ms(allowed_lateness: timedelta) -> int:
    return int(allowed_lateness / timedelta(milliseconds=1))


def next_watermark(
    restored: int, max_event_times: list[int | None], allowed_lateness: timedelta
) -> int:
    """Spark's rule for the watermark a micro-batch completes with: the smallest of the tasks'
    largest event times (a task without records does not hold it back, as an idle Flink
    instance) minus ``allowed_lateness``, never below the ``restored`` one.

    >>> next_watermark(100, [300, None, 250], timedelta(milliseconds=50))
    200
    >>> next_watermark(100, [None], timedelta(0))
    100
    """
    seen = [t for t in max_event_times if t is not None]
    if not seen:
        return restored
    return max(restored, min(seen) - _lateness_ms(allowed_lateness))


def _watermark(df: DataFrame, event_time: str | None, allowed_lateness: timedelta) -> int:
    """The run's largest event time (epoch ms) minus the allowed lateness."""
    if event_time is None:
        return MIN_WATERMARK
    column = _event_time_column(df, event_time)
    latest = df.agg(F.max(column)).first()
    if latest is None or latest[0] is None:
        return MIN_WATERMARK
    return int(latest[0]) - _lateness_ms(allowed_lateness)


def keyed_process(
    df: DataFrame,
    *,
    key: str,
    function: KeyedProcessFunction,
    output_schema: T.StructType,
    job: str,
    checkpoint_id: int,
    operator: str = "main",
    parallelism: int | None = None,
    max_parallelism: int | None = None,
    order_by: list[str] | None = None,
    backend: str | BackendParameters = "heap",
    backend_options: object = None,
    config: StatecoreConfig | None = None,
    event_time: str | None = None,
    allowed_lateness: timedelta = timedelta(0),
    processing_time: TtlTimeProvider | None = None,
    restore_from: str | None = None,
    force_restore: bool = False,
    output_table: str | None = None,
    input_fingerprint: str | Mapping[str, Any] | None = None,
    changelog: bool | ChangelogConfig = False,
    late_output_table: str | None = None,
    retain_checkpoints: int | None = None,
) -> KeyedRun:
    """Process ``df`` keyed by ``key`` with ``function`` as checkpoint ``checkpoint_id``.

    ``order_by`` fixes the processing order within each key (Spark's shuffle does not keep the
    input order). ``event_time`` names a timestamp (or epoch-millisecond) column: it becomes
    ``ctx.timestamp`` and drives the watermark (see the module docstring). ``processing_time``
    is the clock of TTL and processing-time timers (default: the system clock; it is pickled
    to the tasks). ``backend`` names the keyed state backend (``heap`` or ``rocksdb``) and
    ``backend_options`` configures it (``RocksDBOptions`` for ``rocksdb``); or ``backend`` is a
    :class:`~statecore.backends.BackendParameters` holding both. ``restore_from`` is
    a savepoint folder: the run starts from it instead of the job's latest checkpoint (the
    catalog may be empty); a savepoint older than that checkpoint is refused unless
    ``force_restore``.

    Without ``output_table`` the output comes back as a DataFrame of the persisted result
    (``run.unpersist()`` when done). With ``output_table`` (a Delta table path or URI) the
    tasks write the output there and it is committed exactly once with the checkpoint (see
    :mod:`statecore.snapshot.output`); the run's ``output`` then reads this checkpoint's rows
    from the table, also on a replay. This is the faster way: the rows never go back through
    Spark. Late records (event time at or below the restored watermark) never touch state; with
    ``late_output_table`` (a Delta path) they are appended there, in the input's columns,
    exactly once with the checkpoint; without it they are dropped and counted
    (``KeyedRun.late_rows``).

    A run holds the job's lease (a second writer fails with :class:`ConcurrentRunError`), its
    ``checkpoint_id`` must not be below the latest completed one (:class:`CheckpointOrderError`),
    and a replay of a completed id must carry the same input (:class:`ReplayMismatchError`):
    ``input_fingerprint`` names it (a string, or e.g. ``{"batch_id": ..., "offsets": ...}`` of a
    streaming micro-batch); by default it is a fingerprint of ``df.inputFiles()`` (paths, sizes,
    modification times) when the input is files, and not checked otherwise.

    ``changelog`` (``True`` or a :class:`~statecore.snapshot.changelog.ChangelogConfig`) makes
    each checkpoint write the changed keys as change files instead of whole key groups (see the
    README, "Changelog checkpoints").
    ``retain_checkpoints=N`` bounds the job's catalog rows, as a stream needs: once the
    checkpoint completed, the run keeps the job's last ``N`` completed checkpoints, expires the
    older ones and deletes expired rows beyond ``N`` (:mod:`statecore.checkpoint.retain`; an id
    whose row was deleted is then refused with :class:`CheckpointOrderError`, not replayed).
    Files are only deleted by VACUUM (``statecore retention``).
    """
    return _KeyedRunner(
        df,
        KeyedJob(
            key=key,
            function=function,
            process=per_record,
            output_schema=output_schema,
            job=job,
            checkpoint_id=checkpoint_id,
            operator=operator,
            parallelism=parallelism,
            max_parallelism=max_parallelism,
            order_by=order_by,
            backend=BackendParameters.of(backend, backend_options),
            config=config,
            event_time=event_time,
            allowed_lateness=allowed_lateness,
            processing_time=processing_time,
            restore_from=restore_from,
            force_restore=force_restore,
            output_table=output_table,
            input_fingerprint=input_fingerprint,
            changelog=ChangelogConfig.of(changelog),
            late_output_table=late_output_table,
            retain_checkpoints=retain_checkpoints,
        ),
    ).run()


def keyed_process_batches(
    df: DataFrame,
    *,
    key: str,
    function: KeyedBatchFunction,
    output_schema: T.StructType,
    job: str,
    checkpoint_id: int,
    operator: str = "main",
    parallelism: int | None = None,
    max_parallelism: int | None = None,
    order_by: list[str] | None = None,
    backend: str | BackendParameters = "heap",
    backend_options: object = None,
    config: StatecoreConfig | None = None,
    processing_time: TtlTimeProvider | None = None,
    restore_from: str | None = None,
    force_restore: bool = False,
    output_table: str | None = None,
    batch_rows: int = 1_000_000,
    input_fingerprint: str | Mapping[str, Any] | None = None,
    changelog: bool | ChangelogConfig = False,
    retain_checkpoints: int | None = None,
) -> KeyedRun:
    """Like :func:`keyed_process`, with a vectorized ``function``
    (:class:`~statecore.runtime.vectorized.KeyedBatchFunction`): each task gathers Spark's Arrow
    batches into keyed batches of up to ``batch_rows`` rows, and the function reads and writes state
    once per distinct key and batch. The state, checkpoints and operations are the same as the
    per-record API's, so either API may continue the other's checkpoints. Vectorized functions
    have no timers and no event time.
    """
    if not isinstance(function, KeyedBatchFunction):
        raise ConfigError(
            f"{type(function).__name__} is not a KeyedBatchFunction; use "
            "keyed_process for a KeyedProcessFunction"
        )
    if batch_rows < 1:
        raise ConfigError(f"batch_rows must be positive, not {batch_rows}")
    return _KeyedRunner(
        df,
        KeyedJob(
            key=key,
            function=function,
            process=functools.partial(per_batch, batch_rows=batch_rows),
            output_schema=output_schema,
            job=job,
            checkpoint_id=checkpoint_id,
            operator=operator,
            parallelism=parallelism,
            max_parallelism=max_parallelism,
            order_by=order_by,
            backend=BackendParameters.of(backend, backend_options),
            config=config,
            processing_time=processing_time,
            restore_from=restore_from,
            force_restore=force_restore,
            output_table=output_table,
            input_fingerprint=input_fingerprint,
            changelog=ChangelogConfig.of(changelog),
            retain_checkpoints=retain_checkpoints,
        ),
    ).run()


@dataclass(frozen=True, kw_only=True)
class KeyedJob:
    """What one run of either API is asked to do: the arguments of :func:`keyed_process`, plus
    how a task processes its batches (per record, or in keyed batches)."""

    key: str
    function: KeyedProcessFunction | KeyedBatchFunction
    process: Callable[[TaskSpec], Process]
    output_schema: T.StructType
    job: str
    checkpoint_id: int
    operator: str = "main"
    parallelism: int | None = None
    max_parallelism: int | None = None
    order_by: list[str] | None = None
    backend: BackendParameters = field(default_factory=BackendParameters)
    config: StatecoreConfig | None = None
    event_time: str | None = None
    allowed_lateness: timedelta = timedelta(0)
    processing_time: TtlTimeProvider | None = None
    restore_from: str | None = None
    force_restore: bool = False
    output_table: str | None = None
    input_fingerprint: str | Mapping[str, Any] | None = None
    changelog: ChangelogConfig | None = None
    late_output_table: str | None = None
    stream: bool = False
    """A micro-batch of a stream: Spark's watermark rule (see the module docstring)."""
    retain_checkpoints: int | None = None
    live_lookups: bool = False
    """Tasks serve live lookups of their state (:mod:`statecore.runtime.live`)."""


@dataclass(frozen=True, kw_only=True)
class _Plan:
    """The planned checkpoint, and what the tasks are given to execute it."""

    checkpoint: PlannedCheckpoint
    spec: TaskSpec


class _KeyedRunner:
    """One run: :meth:`begin` (the job's lease, what a dead writer left, the checkpoint),
    :meth:`plan` (schemas, watermark, the tasks' spec), :meth:`execute` (the Spark tasks),
    :meth:`commit` (output table, state tables, catalog, each fenced by the lease's epoch)."""

    def __init__(self, df: DataFrame, job: KeyedJob) -> None:
        check_name("job", job.job)
        check_name("operator", job.operator)
        missing = [c for c in job.order_by or () if c not in df.columns]
        if missing:
            raise ConfigError(
                f"job {job.job!r}, checkpoint {job.checkpoint_id}: order_by names {missing}, "
                f"which are not in the input columns {df.columns}"
            )
        if job.retain_checkpoints is not None and job.retain_checkpoints < 1:
            raise ConfigError(
                f"job {job.job!r}: retain_checkpoints={job.retain_checkpoints}; keep at least 1"
            )
        self.df = df
        self.job = job
        self.config = job.config or StatecoreConfig.resolve()
        self.key_type = _key_info(df, job.key)
        self.spark = df.sparkSession
        # Timestamps are instants: in UTC, as a Delta table keeps them (it refuses another time
        # zone); the session's time zone only changes how Spark shows them.
        self.arrow_output = to_arrow_schema(job.output_schema, timezone="UTC")
        self.sink = (
            None
            if job.output_table is None
            else OutputTable(
                job.output_table, self.arrow_output, app_id=f"statecore:{job.job}/{job.operator}"
            )
        )
        if job.event_time is not None:
            _event_time_column(df, job.event_time)
        elif job.late_output_table is not None:
            raise ConfigError(
                f"job {job.job!r}: a late-data table ({job.late_output_table}) needs an "
                "event_time column"
            )
        self.arrow_input = to_arrow_schema(df.schema, timezone="UTC")
        self.late_sink = (
            None
            if job.late_output_table is None
            else OutputTable(
                job.late_output_table,
                self.arrow_input,
                app_id=f"statecore:{job.job}/{job.operator}/late",
            )
        )

    @property
    def sinks(self) -> list[OutputTable]:
        """The tables committed with the checkpoint besides the state: output, late data."""
        return [s for s in (self.sink, self.late_sink) if s is not None]

    def run(self) -> KeyedRun:
        job = self.job
        with contextlib.ExitStack() as stack:
            catalog = Catalog.connect(self.config.catalog_url)
            stack.callback(catalog.close)
            coordinator = self.begin(catalog, stack)
            planned = coordinator.plan(
                job.checkpoint_id,
                parallelism=job.parallelism,
                max_parallelism=job.max_parallelism,
                default_parallelism=self.spark.sparkContext.defaultParallelism,
                input_identity=input_identity(self.df, job.input_fingerprint),
            )
            if planned.replayed:
                return KeyedRun(
                    self.committed_output,
                    catalog.get_checkpoint(job.job, job.checkpoint_id),
                    True,
                    0,
                )
            try:  # before any record is processed
                plan = self.plan(coordinator, planned)
            except Exception as exc:
                coordinator.fail(job.checkpoint_id, exc)
                raise
            result, metas = self.execute(coordinator, plan)
            return self.commit(coordinator, plan, result, metas)
        raise AssertionError("unreachable")  # pragma: no cover (mypy: ExitStack may swallow)

    def begin(self, catalog: Catalog, stack: contextlib.ExitStack) -> CheckpointCoordinator:
        """Restore a savepoint if asked, take the job's lease (held until the run ends), and
        resolve what a writer that is gone left behind."""
        job = self.job
        if job.restore_from is not None and not _is_complete(catalog, job.job, job.checkpoint_id):
            restore_savepoint(
                self.config,
                catalog,
                job.restore_from,
                job=job.job,
                parallelism=job.parallelism,
                force=job.force_restore,
            )
        if job.job not in {j.name for j in catalog.list_jobs()}:
            p = job.parallelism or self.spark.sparkContext.defaultParallelism
            catalog.ensure_job(
                job.job,
                parallelism=p,
                max_parallelism=job.max_parallelism or compute_default_max_parallelism(p),
            )
        lease = stack.enter_context(
            hold_lease(
                catalog,
                job.job,
                f"{RUN_OPERATION} {job.checkpoint_id}",
                timeout=self.config.lease_timeout,
            )
        )
        coordinator = CheckpointCoordinator(
            self.config, catalog, job=job.job, operator=job.operator, lease=lease
        )
        coordinator.resolve_abandoned()
        for sink in self.sinks:
            completed = catalog.latest_checkpoint_id(job.job)
            if sink.roll_back(completed=completed, fence=coordinator.fence) is not None:
                log.warning(
                    "job %s: rolled the output table %s back past the output of checkpoints "
                    "after %s that never completed",
                    job.job,
                    sink.uri,
                    completed,
                )
        return coordinator

    def plan(self, coordinator: CheckpointCoordinator, planned: PlannedCheckpoint) -> _Plan:
        """The states' schemas, the watermark and the sink checked; the tasks' spec."""
        job = self.job
        planned = coordinator.check_compatible(
            planned, _probe_states(job.function, self.key_type, planned, job.job, job.operator)
        )
        base = planned.base
        start = MIN_WATERMARK if base is None or base.watermark is None else base.watermark
        if job.stream:  # Spark's rule: the whole micro-batch at the restored watermark
            watermark = start
        else:
            watermark = max(start, _watermark(self.df, job.event_time, job.allowed_lateness))
        for sink in self.sinks:
            sink.check_schema()
        spec = TaskSpec(
            key=job.key,
            key_type=self.key_type,
            key_group_column=KEY_GROUP_COLUMN,
            parallelism=planned.parallelism,
            max_parallelism=planned.max_parallelism,
            checkpoint_id=planned.checkpoint_id,
            restore=planned.restore,
            job=job.job,
            operator=job.operator,
            backend_parameters=job.backend,
            home=self.config.home,
            table_uris=functools.partial(
                state_table_uri, self.config.warehouse, job.job, job.operator
            ),
            output_schema=self.arrow_output,
            event_time=job.event_time,
            watermark=watermark,
            processing_time=job.processing_time,
            output_table=job.output_table,
            changelog=job.changelog,
            latency=self.config_latency(),
            start_watermark=start,
            late_output_table=job.late_output_table,
            late_schema=self.arrow_input,
            live_token=(
                coordinator.catalog.live_token(job.job, create=True) if job.live_lookups else None
            ),
        )
        return _Plan(checkpoint=planned, spec=spec)

    def config_latency(self) -> LatencyTracking | None:
        interval = self.config.latency_sample_interval
        if not interval:
            return None
        return LatencyTracking(interval, self.config.latency_history_size)

    def execute(
        self, coordinator: CheckpointCoordinator, plan: _Plan
    ) -> tuple[DataFrame, list[dict[str, Any]]]:
        """Run the tasks; the result (output rows and reports) and each task's report."""
        job, spec = self.job, plan.spec
        try:
            aligned = align_to_key_groups(
                self.df,
                job.key,
                parallelism=spec.parallelism,
                max_parallelism=spec.max_parallelism,
                order_by=job.order_by,
            )
            result_schema = T.StructType(
                [*job.output_schema.fields, T.StructField(META, T.StringType())]
            )
            result = aligned.mapInArrow(
                task_function(spec, job.function, job.process(spec)), result_schema
            )
        except Exception as exc:
            coordinator.fail(job.checkpoint_id, exc)
            raise
        if self.sink is None:  # the output stays with Spark: computed once, kept for the caller
            result = result.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            metas = [
                json.loads(r[0])
                for r in result.where(F.col(META).isNotNull()).select(META).collect()
            ]
        except Exception as exc:
            result.unpersist()
            coordinator.fail(job.checkpoint_id, exc)
            raise _task_error(exc, job.job, job.checkpoint_id) from exc
        return result, metas

    def commit(
        self,
        coordinator: CheckpointCoordinator,
        plan: _Plan,
        result: DataFrame,
        metas: list[dict[str, Any]],
    ) -> KeyedRun:
        """Commit the output table, then every state table and the catalog; when the state
        does not complete, the output commit is rolled back."""
        job, checkpoint_id = self.job, self.job.checkpoint_id
        if job.live_lookups:  # where the tasks' states are now, whether or not this completes
            coordinator.catalog.set_live_endpoints(
                job.job, job.operator, _live_endpoints(job, plan.spec, metas)
            )
        output_committed = False
        for sink, field_name in ((self.sink, "output"), (self.late_sink, "late_output")):
            if sink is None:
                continue
            files = [OutputFile(**m[field_name]) for m in metas if m.get(field_name)]
            try:
                committed = sink.commit(files, checkpoint_id=checkpoint_id, fence=coordinator.fence)
                output_committed = output_committed or committed
                if not committed:
                    log.warning(
                        "job %s: the %s of checkpoint %s was committed by an earlier "
                        "attempt; this attempt's files were dropped",
                        job.job,
                        field_name.replace("_", " "),
                        checkpoint_id,
                    )
            except Exception as exc:
                if output_committed and not isinstance(exc, errors.ConcurrentRunError):
                    self._roll_back_output(coordinator)
                coordinator.fail(checkpoint_id, exc)
                raise
        snapshots = [StateSnapshotResult.from_json_dict(s) for m in metas for s in m["states"]]
        restore = _sum_restore_metrics(metas)
        watermark = plan.spec.watermark
        if job.stream:
            watermark = next_watermark(
                plan.spec.start_watermark,
                [m.get("max_event_time") for m in metas],
                job.allowed_lateness,
            )
        try:
            record = coordinator.commit(
                plan.checkpoint,
                snapshots,
                metrics=_metrics(metas, restore),
                watermark=None if watermark == MIN_WATERMARK else watermark,
            )
        except Exception as exc:
            if output_committed and not isinstance(exc, errors.ConcurrentRunError):
                self._roll_back_output(coordinator)
            raise
        if job.retain_checkpoints is not None:
            _retain(coordinator.catalog, job.job, job.retain_checkpoints)
        records = sum(m["records"] for m in metas)
        late_rows = sum(m.get("late_rows", 0) for m in metas)
        if late_rows:
            log.warning(
                "job %s: checkpoint %s: %d late record(s) at or below the watermark %s %s",
                job.job,
                checkpoint_id,
                late_rows,
                plan.spec.start_watermark,
                "went to the late-data table" if self.late_sink is not None else "were dropped",
            )
        log.info(
            "job %s: checkpoint %s complete (%d records, %d rows of state)",
            job.job,
            checkpoint_id,
            records,
            record.total_rows,
        )
        if plan.checkpoint.restore.checkpoint_id is not None:
            log.info(
                "job %s: restored checkpoint %s with the %s backend: %d of %d tasks kept their "
                "state warm (%d key groups), %d key groups reused local state, %d rows ingested",
                job.job,
                plan.checkpoint.restore.checkpoint_id,
                job.backend.name,
                restore.get("warm_tasks", 0),
                restore.get("tasks", 0),
                restore.get("warm_key_groups", 0),
                restore.get("reused_key_groups", 0),
                restore.get("ingested_rows", 0),
            )
        pending = [
            m["next_processing_timer"] for m in metas if m.get("next_processing_timer") is not None
        ]
        return KeyedRun(
            self.committed_output
            if self.sink is not None
            else lambda: result.where(F.col(META).isNull()).drop(META),
            record,
            False,
            records,
            restore,
            late_rows,
            min(pending, default=None),
            persisted=None if self.sink is not None else result,
        )

    def _roll_back_output(self, coordinator: CheckpointCoordinator) -> None:
        for sink in self.sinks:
            try:
                completed = coordinator.catalog.latest_checkpoint_id(self.job.job)
                sink.roll_back(completed=completed, fence=coordinator.fence)
            except errors.StateError as exc:  # the next run rolls it back first
                log.warning(
                    "job %s: rollback of the table %s failed: %s", self.job.job, sink.uri, exc
                )

    def committed_output(self) -> DataFrame:
        return _committed_output(
            self.spark, self.sink, self.job.output_schema, self.job.checkpoint_id
        )


def _committed_output(
    spark: SparkSession, sink: OutputTable | None, output_schema: T.StructType, checkpoint_id: int
) -> DataFrame:
    """The rows of ``checkpoint_id`` in the output table (none without an output table)."""
    uris = [] if sink is None else sink.checkpoint_files(checkpoint_id)
    if not uris:
        return spark.createDataFrame([], output_schema)
    return spark.read.schema(output_schema).parquet(*uris)


def _retain(catalog: Catalog, job: str, retain: int) -> None:
    """The run's retention, under its lease; a failure leaves the checkpoint complete (the
    next run retries it)."""
    try:
        retained = retain_checkpoints(catalog, job, retain=retain)
    except errors.StateError as exc:
        log.warning("job %s: retention of the last %d checkpoints failed: %s", job, retain, exc)
        return
    if retained.expired or retained.deleted:
        log.info(
            "job %s: expired checkpoints %s, deleted the rows of %s (retaining %d)",
            job,
            list(retained.expired),
            list(retained.deleted),
            retain,
        )


def _is_complete(catalog: Catalog, job: str, checkpoint_id: int) -> bool:
    """Whether the run is a replay (then a savepoint to restore from was restored already)."""
    if job not in {j.name for j in catalog.list_jobs()}:
        return False
    done = [c for c in catalog.list_checkpoints(job) if c.checkpoint_id == checkpoint_id]
    return bool(done) and done[0].status in (CheckpointStatus.COMPLETED, CheckpointStatus.EXPIRED)


_ERROR_LINE = re.compile(r"statecore\.errors\.(\w+): (.*)")


def _task_error(exc: Exception, job: str, checkpoint_id: int) -> Exception:
    """A statecore error raised in a Spark task, re-raised as itself on the driver."""
    found = _ERROR_LINE.findall(str(exc))
    if found:
        name, message = found[-1]
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, errors.StateError):
            return cls(f"job {job!r}, checkpoint {checkpoint_id}: {message}")
    return errors.CheckpointCommitError(
        f"job {job!r}, checkpoint {checkpoint_id} failed in a Spark task: {exc}"
    )


def _live_endpoints(
    job: KeyedJob, spec: TaskSpec, metas: list[dict[str, Any]]
) -> list[LiveEndpoint]:
    """Where each task of the run serves live lookups (those that reported an address)."""
    out = []
    for m in metas:
        if m.get("live"):
            key_groups = spec.key_groups(m["subtask"])
            out.append(
                LiveEndpoint(
                    job=job.job,
                    operator=job.operator,
                    subtask=m["subtask"],
                    key_group_start=key_groups.start,
                    key_group_end=key_groups.end,
                    address=m["live"],
                    checkpoint_id=spec.checkpoint_id,
                )
            )
    return out


def _metrics(metas: list[dict[str, Any]], restore: dict[str, int]) -> dict[str, Any]:
    """What the catalog keeps of the tasks' reports: how many tasks ran and how many of them
    continued their state warm (``tasks``, ``warm_tasks``, from ``restore``, the tasks' restore
    counters summed), each subtask's restore (bytes, seconds) and, with latency tracking on, the
    latency percentiles over every task's samples."""
    metrics: dict[str, Any] = {
        "tasks": restore["tasks"],
        "warm_tasks": restore.get("warm_tasks", 0),
        "restore": sorted(
            (m["restore_timing"] for m in metas if m.get("restore_timing")),
            key=lambda t: t["subtask"],
        ),
    }
    reports = [m["latency"] for m in metas if m.get("latency")]
    if reports:
        metrics["latency"] = latency_percentiles(reports)
    return metrics


def _sum_restore_metrics(metas: list[dict[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {"tasks": len(metas)}
    for meta in metas:
        for name, value in meta.get("restore", {}).items():
            total[name] = total.get(name, 0) + int(value)
    return total
