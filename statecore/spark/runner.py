"""One run of the keyed runtime on the driver: begin, plan, execute, commit.

:class:`KeyedRunner` plans and executes; what the checkpoint commits (the output and late-data
tables, the state tables) it hands to the coordinator as commit participants
(:mod:`statecore.checkpoint.participants`), which owns the order of the commits and the failure
policy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from statecore import errors
from statecore.backends.timers import MAX_WATERMARK, MIN_WATERMARK
from statecore.catalog import (
    RUN_OPERATION,
    Catalog,
    CheckpointStatus,
    LiveEndpoint,
)
from statecore.checkpoint.coordinator import CheckpointCoordinator, PlannedCheckpoint
from statecore.checkpoint.lock import hold_lease
from statecore.checkpoint.output_records import staged_output_folder
from statecore.checkpoint.outputs import OutputSink
from statecore.checkpoint.retain import retain_checkpoints
from statecore.config import StatecoreConfig, check_name
from statecore.errors import ConfigError
from statecore.keygroups import compute_default_max_parallelism
from statecore.ops.savepoint import register_savepoint_job, restore_savepoint
from statecore.runtime.latency import LatencyTracking, latency_percentiles
from statecore.runtime.lateness import LateData
from statecore.runtime.shares import TaskShares
from statecore.runtime.task import StateSchema, StateSnapshotResult
from statecore.snapshot import TIMERS, state_table_uri
from statecore.snapshot.locations import canonical_location, output_app_id
from statecore.snapshot.output import OutputFile, OutputTable, output_table_key
from statecore.spark.executor import (
    LATE_DATA,
    META,
    SIDE_OUTPUT,
    TaskSpec,
    task_function,
)
from statecore.spark.host_stop import stop_marker_uri
from statecore.spark.identity import input_identity
from statecore.spark.job import KeyedJob, KeyedRun, named_outputs
from statecore.spark.partitioning import KEY_GROUP_COLUMN, align_to_key_groups, key_column
from statecore.spark.task_errors import task_error
from statecore.spark.watermark import (
    event_time_column,
    lateness_ms,
    next_watermark,
    run_watermark,
)
from statecore.types import TypeInfo

__all__ = ["KeyedRunner"]

# the run's log lines keep the logger of the API they serve (users configure it by that name)
log = logging.getLogger("statecore.spark.keyed")


def _key_info(df: DataFrame, key: str) -> TypeInfo:
    key_column(df, key)  # raises KeyTypeError for unsupported types
    data_type = df.schema[key].dataType
    if isinstance(data_type, T.StringType):
        return TypeInfo.of(str)
    if isinstance(data_type, T.BinaryType):
        return TypeInfo.of(bytes)
    return TypeInfo.of(int)


def _registered(snapshots: Sequence[StateSnapshotResult]) -> list[StateSchema]:
    """The states the tasks' function registered, as their snapshots report them."""
    seen = {
        (s.table_kind, s.state): StateSchema(s.state, s.table_kind, s.catalog_kind, s.schema)
        for s in snapshots
        if s.table_kind in ("keyed", "operator", TIMERS)
    }
    return list(seen.values())


@dataclass(frozen=True, kw_only=True)
class _Plan:
    """The planned checkpoint, and what the tasks are given to execute it."""

    checkpoint: PlannedCheckpoint
    spec: TaskSpec


class KeyedRunner:
    """One run: :meth:`begin` (the job's lease, what a dead writer left, the savepoint to
    restore), :meth:`plan` (schemas, watermark, the tasks' spec), :meth:`execute` (the Spark
    tasks), :meth:`commit` (the coordinator commits the participants and completes the
    checkpoint, each commit fenced by the lease's epoch)."""

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
                job.output_table,  # as the user spells it: Spark reads its files back by it
                self.arrow_output,
                app_id=output_app_id(self.config.warehouse, job.job, job.operator),
                warehouse=canonical_location(self.config.warehouse),
            )
        )
        self.late_data = LateData.of(
            job.late_data, late_output_table=job.late_output_table, job=job.job
        )
        if job.event_time is not None:
            event_time_column(df, job.event_time)
        elif self.late_data is not LateData.PROCESS:
            raise ConfigError(
                f"job {job.job!r}: late_data={self.late_data.value!r} needs an event_time "
                "column (without one no record is late)"
            )
        self.arrow_input = to_arrow_schema(df.schema, timezone="UTC")
        self.late_sink = (
            None
            if job.late_output_table is None
            else OutputTable(
                job.late_output_table,
                self.arrow_input,
                app_id=output_app_id(self.config.warehouse, job.job, job.operator, "late-data"),
                warehouse=canonical_location(self.config.warehouse),
            )
        )
        self.named, self.dropped_side_outputs = named_outputs(
            job, late_sink=self.late_sink, late_schema=self.arrow_input
        )
        """The output tables besides the main one: the late-data table, then the side
        outputs' (their staging folders are the checkpoint's, set in :meth:`plan`)."""

    def sinks(self, metas: Sequence[Mapping[str, Any]] = ()) -> list[OutputSink]:
        """The output and late-data tables, each with the files the tasks reported in
        ``metas``: committed once the checkpoint completed."""
        out = []
        targets = [(self.sink, "output", "output")] + [
            (table, named.report_key, named.kind) for named, table in self.named
        ]
        for sink, field_name, kind in targets:
            if sink is not None:
                files = [OutputFile(**m[field_name]) for m in metas if m.get(field_name)]
                out.append(OutputSink(sink, files, kind=kind))
        return out

    def bind_outputs(self, catalog: Catalog) -> None:
        """Bind the output and late-data tables to this job and operator (at its first run);
        :class:`~statecore.errors.OutputOwnedError` before anything is written when another
        job, operator or kind writes one of them."""
        tables = [(output_table_key(s.table.uri), s.kind) for s in self.sinks()]
        if tables:
            catalog.bind_outputs(tables, job=self.job.job, operator=self.job.operator)

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
            try:  # nothing is committed yet: the checkpoint fails
                plan = self.plan(coordinator, planned)
                result, metas = self.execute(plan)
            except Exception as exc:
                coordinator.fail(job.checkpoint_id, exc)
                raise
            try:
                return self.commit(coordinator, plan, result, metas)
            except BaseException:
                if self.sink is None:  # the caller never gets the persisted result
                    result.unpersist()
                raise
        raise AssertionError("unreachable")  # pragma: no cover (mypy: ExitStack may swallow)

    def begin(self, catalog: Catalog, stack: contextlib.ExitStack) -> CheckpointCoordinator:
        """Take the job's lease (held until the run ends), resolve what a writer that is gone
        left behind, and restore a savepoint if asked, under the lease."""
        job = self.job
        self.bind_outputs(catalog)
        if not catalog.has_job(job.job):
            if job.restore_from is not None:  # registered as the savepoint's
                register_savepoint_job(
                    catalog, job.restore_from, job=job.job, parallelism=job.parallelism
                )
            else:
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
                wait=self.config.lease_wait,
            )
        )
        coordinator = CheckpointCoordinator(
            self.config, catalog, job=job.job, operator=job.operator, lease=lease
        )
        coordinator.resolve_abandoned()
        if job.restore_from is not None and not _is_complete(catalog, job.job, job.checkpoint_id):
            restore_savepoint(
                self.config,
                catalog,
                job.restore_from,
                job=job.job,
                parallelism=job.parallelism,
                force=job.force_restore,
                lease=lease,
            )
        return coordinator

    def plan(self, coordinator: CheckpointCoordinator, planned: PlannedCheckpoint) -> _Plan:
        """The watermark and the sinks checked; the tasks' spec. No user code runs here: each
        task checks the states its function registers against the catalog's
        (``RestorePlan.check_state``, before its first record), and the commit checks again
        what the tasks report."""
        job = self.job
        base = planned.base
        start = MIN_WATERMARK if base is None or base.watermark is None else base.watermark
        if start == MAX_WATERMARK and base is not None:
            raise ConfigError(
                f"job {job.job!r}: checkpoint {base.checkpoint_id} ended its input "
                "(end_of_input=True, the watermark at MAX_WATERMARK): no record can follow; "
                "start a new job, or restore a savepoint taken before it (restore_from=)"
            )
        if job.processing_timers_at_end and not job.end_of_input:
            raise ConfigError(
                f"job {job.job!r}: processing_timers_at_end=True fires every processing-time "
                "timer at the end of input; give end_of_input=True with it"
            )
        if job.end_of_input:
            watermark = MAX_WATERMARK
        elif job.stream:  # Spark's rule: the whole micro-batch at the restored watermark
            watermark = start
        else:
            watermark = max(start, run_watermark(self.df, job.event_time, job.allowed_lateness))
        for sink in self.sinks():  # fail before processing, not at the commit
            sink.check()
        spec = TaskSpec(
            key=job.key,
            key_type=self.key_type,
            key_group_column=KEY_GROUP_COLUMN,
            parallelism=planned.parallelism,
            max_parallelism=planned.max_parallelism,
            checkpoint_id=planned.checkpoint_id,
            restore=TaskShares.cut(
                planned.restore,
                parallelism=planned.parallelism,
                max_parallelism=planned.max_parallelism,
            ),
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
            processing_timers_at_end=job.processing_timers_at_end,
            output_table=job.output_table,
            changelog=job.changelog,
            latency=self.config_latency(),
            start_watermark=start,
            lateness_ms=None if job.event_time is None else lateness_ms(job.allowed_lateness),
            late_data=self.late_data,
            output_staging=staged_output_folder(
                self.config.warehouse, job.job, planned.checkpoint_id, "output"
            ),
            named_outputs=tuple(
                dataclasses.replace(
                    named,
                    staging=staged_output_folder(
                        self.config.warehouse,
                        job.job,
                        planned.checkpoint_id,
                        named.kind if named.kind == LATE_DATA else f"{SIDE_OUTPUT}/{named.name}",
                    ),
                )
                for named, _ in self.named
            ),
            dropped_side_outputs=self.dropped_side_outputs,
            live_token=(
                coordinator.catalog.live_token(job.job, create=True) if job.live_lookups else None
            ),
            warm_host=job.stream and job.warm_hosts,
            host_stop_marker=(
                stop_marker_uri(self.config.warehouse, job.job, job.operator)
                if job.stream and job.warm_hosts and not job.live_lookups
                else None
            ),
        )
        return _Plan(checkpoint=planned, spec=spec)

    def processing_order(self) -> list[str] | None:
        """How a task's records are sorted: with an event time, by it (as records arrive in
        Flink), then ``order_by``, then the key, so that ties fall the same way in every run
        and a replay fires the same timers at the same places; else by ``order_by``
        (``None``: as Spark has them)."""
        job = self.job
        if job.event_time is None:
            return job.order_by
        order = [job.event_time, *(c for c in job.order_by or () if c != job.event_time)]
        return order if job.key in order else [*order, job.key]

    def config_latency(self) -> LatencyTracking | None:
        interval = self.config.latency_sample_interval
        if not interval:
            return None
        return LatencyTracking(interval, self.config.latency_history_size)

    def execute(self, plan: _Plan) -> tuple[DataFrame, list[dict[str, Any]]]:
        """Run the tasks; the result (output rows and reports) and each task's report."""
        job, spec = self.job, plan.spec
        aligned = align_to_key_groups(
            self.df,
            job.key,
            parallelism=spec.parallelism,
            max_parallelism=spec.max_parallelism,
            order_by=self.processing_order(),
        )
        result_schema = T.StructType(
            [*job.output_schema.fields, T.StructField(META, T.StringType())]
        )
        result = aligned.mapInArrow(
            task_function(spec, job.function, job.process(spec)), result_schema
        )
        if self.sink is None:  # the output stays with Spark: computed once, kept for the caller
            result = result.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            metas = [
                json.loads(r[0])
                for r in result.where(F.col(META).isNotNull()).select(META).collect()
            ]
        except Exception as exc:
            result.unpersist()
            raise task_error(exc, job.job, job.checkpoint_id) from exc
        return result, metas

    def commit(
        self,
        coordinator: CheckpointCoordinator,
        plan: _Plan,
        result: DataFrame,
        metas: list[dict[str, Any]],
    ) -> KeyedRun:
        """Hand the checkpoint to the coordinator, which commits the state tables, completes
        it and then commits the output and late-data tables (or fails it: the state tables
        rolled back, the output files deleted); the run's outcome."""
        job, checkpoint_id = self.job, self.job.checkpoint_id
        try:
            outputs = self.sinks(metas)
        except Exception as exc:
            coordinator.fail(checkpoint_id, exc)
            raise
        try:
            if job.live_lookups:  # where the tasks' states are now, whether or not it completes
                coordinator.catalog.set_live_endpoints(
                    job.job, job.operator, _live_endpoints(job, plan.spec, metas)
                )
            snapshots = [StateSnapshotResult.from_json_dict(s) for m in metas for s in m["states"]]
            checkpoint = coordinator.check_compatible(plan.checkpoint, _registered(snapshots))
            restore = _sum_restore_metrics(metas)
            watermark = plan.spec.watermark
            if job.stream:
                watermark = next_watermark(
                    plan.spec.start_watermark,
                    [m.get("max_event_time") for m in metas],
                    job.allowed_lateness,
                )
        except Exception as exc:
            coordinator.abort(checkpoint_id, exc, outputs=outputs)
            raise
        metrics = _metrics(metas, restore)
        record = coordinator.commit(
            checkpoint,
            snapshots,
            metrics=metrics,
            watermark=None if watermark == MIN_WATERMARK else watermark,
            outputs=outputs,
        )
        if job.retain_checkpoints is not None:
            uris = [t.uri for t in (self.sink, *(t for _, t in self.named)) if t is not None]
            _retain(coordinator.catalog, job.job, job.retain_checkpoints, uris)
        records = sum(m["records"] for m in metas)
        late_rows = sum(m.get("late_rows", 0) for m in metas)
        if late_rows:
            log.warning(
                "job %s: checkpoint %s: %d late record(s) at or below the watermark %s %s",
                job.job,
                checkpoint_id,
                late_rows,
                plan.spec.start_watermark,
                {
                    LateData.PROCESS: "reached the function",
                    LateData.DROP: "were dropped",
                    LateData.TABLE: "went to the late-data table",
                }[self.late_data],
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
                "state warm (%d key groups), %d key groups reused local state, %d rows "
                "ingested; state acquired in %s ms (%s ms of CPU)",
                job.job,
                plan.checkpoint.restore.checkpoint_id,
                job.backend.name,
                restore.get("warm_tasks", 0),
                restore.get("tasks", 0),
                restore.get("warm_key_groups", 0),
                restore.get("reused_key_groups", 0),
                restore.get("ingested_rows", 0),
                metrics["acquire_ms"],
                metrics["acquire_cpu_ms"],
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


def _retain(catalog: Catalog, job: str, retain: int, outputs: Sequence[str]) -> None:
    """The run's retention, under its lease, with the Delta log cleanup of the job's tables and
    its ``outputs`` (output and late-data tables); a failure leaves the checkpoint complete
    (the next run retries it)."""
    try:
        retained = retain_checkpoints(catalog, job, retain=retain, outputs=outputs)
    except errors.StateError as exc:
        log.warning("job %s: retention of the last %d checkpoints failed: %s", job, retain, exc)
        return
    if retained.expired or retained.deleted or retained.logs:
        log.info(
            "job %s: expired checkpoints %s, deleted the rows of %s and %d Delta log entries "
            "(retaining %d)",
            job,
            list(retained.expired),
            list(retained.deleted),
            retained.log_files_deleted,
            retain,
        )


def _is_complete(catalog: Catalog, job: str, checkpoint_id: int) -> bool:
    """Whether the run is a replay (then a savepoint to restore from was restored already)."""
    status = catalog.checkpoint_status(job, checkpoint_id)
    return status in (CheckpointStatus.COMPLETED, CheckpointStatus.EXPIRED)


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
        "acquire_ms": _acquire_ms(metas, "acquire_s"),
        "acquire_cpu_ms": _acquire_ms(metas, "acquire_cpu_s"),
    }
    reports = [m["latency"] for m in metas if m.get("latency")]
    if reports:
        metrics["latency"] = latency_percentiles(reports)
    return metrics


def _acquire_ms(metas: list[dict[str, Any]], name: str) -> list[float]:
    """Per subtask, the ms its task took to get its state (kept warm, or restored, with the
    hand-over to its warm state host): ``acquire_s``, or the CPU time of its thread in it,
    ``acquire_cpu_s``."""
    ordered = sorted(metas, key=lambda m: m["subtask"])
    return [round(m.get(name, 0.0) * 1000, 1) for m in ordered]


def _sum_restore_metrics(metas: list[dict[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {"tasks": len(metas)}
    for meta in metas:
        for name, value in meta.get("restore", {}).items():
            total[name] = total.get(name, 0) + int(value)
    return total
