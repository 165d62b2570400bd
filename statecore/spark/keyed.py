"""``keyed_process``: run a ``KeyedProcessFunction`` over a DataFrame as one checkpoint.

One run restores the last completed checkpoint for each task's key-group range, processes every
record, fires the timers that came due, snapshots what changed, commits and completes the
checkpoint. A batch job calls it once per logical date; a Structured Streaming job calls it from
``foreachBatch`` with the micro-batch id as ``checkpoint_id``, so a replayed micro-batch is a no-op.

With an ``event_time`` column the watermark advances, at the end of the run, to the run's largest
event time minus ``allowed_lateness`` (computed on the driver, the same for every task), and every
event-time timer up to it fires; processing-time timers due by the end of the run fire too. As in
Flink after a restore, each run starts from the minimum watermark.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pyspark import StorageLevel, cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from statecore import errors
from statecore.catalog import Catalog, CheckpointRecord, CheckpointStatus
from statecore.checkpoint import CheckpointCoordinator, PlannedCheckpoint
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.maintenance import check_not_locked
from statecore.runtime import KeyedProcessFunction
from statecore.savepoint import restore_savepoint
from statecore.snapshot import state_table_uri
from statecore.snapshot.output import OutputFile, OutputTable
from statecore.spark.executor import (
    BACKENDS,
    META,
    Process,
    TaskSpec,
    per_batch,
    per_record,
    task_function,
)
from statecore.spark.partitioning import KEY_GROUP_COLUMN, align_to_key_groups, key_column
from statecore.task import StateSchema, StateSnapshotResult, probe_states
from statecore.timers import MIN_WATERMARK
from statecore.ttl.time import TtlTimeProvider
from statecore.types import TypeInfo
from statecore.vectorized import KeyedBatchFunction

__all__ = ["KeyedRun", "keyed_process", "keyed_process_batches", "BACKENDS"]

log = logging.getLogger(__name__)

def _check_backend_options(backend: str, options: object) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"unknown state backend {backend!r}; known: {sorted(BACKENDS)}")
    if options is None:
        return
    if backend == "rocksdb":
        from statecore.backends.rocksdb import RocksDBOptions

        if isinstance(options, RocksDBOptions):
            return
    raise ConfigError(f"state backend {backend!r} does not take options "
                      f"{type(options).__name__}; the rocksdb backend takes RocksDBOptions")


@dataclass(frozen=True)
class KeyedRun:
    """The outcome of one run: its output rows, the completed checkpoint, whether it replayed."""

    output: DataFrame
    checkpoint: CheckpointRecord
    replayed: bool
    records: int
    restore: dict[str, int] = field(default_factory=dict)
    """Summed over tasks: how the backends got their state (e.g. ``reused_key_groups``,
    ``ingested_rows``), and ``tasks``."""


def _key_info(df: DataFrame, key: str) -> TypeInfo:
    key_column(df, key)  # raises KeyTypeError for unsupported types
    data_type = df.schema[key].dataType
    if isinstance(data_type, T.StringType):
        return TypeInfo.of(str)
    if isinstance(data_type, T.BinaryType):
        return TypeInfo.of(bytes)
    return TypeInfo.of(int)


def _probe_states(function: KeyedProcessFunction | KeyedBatchFunction, key_type: TypeInfo,
                  planned: PlannedCheckpoint, job: str, operator: str) -> list[StateSchema]:
    """The states a copy of the function registers (the function itself ships untouched)."""
    probe: KeyedProcessFunction | KeyedBatchFunction = cloudpickle.loads(
        cloudpickle.dumps(function))  # type: ignore[no-untyped-call]
    return probe_states(probe, key_type, job=job, operator=operator,
                        parallelism=planned.parallelism, max_parallelism=planned.max_parallelism)


def _watermark(df: DataFrame, event_time: str | None, allowed_lateness: timedelta) -> int:
    """The run's largest event time (epoch ms) minus the allowed lateness."""
    if event_time is None:
        return MIN_WATERMARK
    if event_time not in df.columns:
        raise ConfigError(f"event-time column {event_time!r} is not in {df.columns}")
    data_type = df.schema[event_time].dataType
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
        column = F.unix_millis(F.col(event_time).cast("timestamp"))
    elif isinstance(data_type, T.LongType | T.IntegerType):
        column = F.col(event_time)
    else:
        raise ConfigError(f"event-time column {event_time!r} has type "
                          f"{data_type.simpleString()}; use a timestamp or epoch milliseconds")
    latest = df.agg(F.max(column)).first()
    if latest is None or latest[0] is None:
        return MIN_WATERMARK
    return int(latest[0]) - int(allowed_lateness / timedelta(milliseconds=1))


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
    backend: str = "heap",
    backend_options: object = None,
    config: StatecoreConfig | None = None,
    event_time: str | None = None,
    allowed_lateness: timedelta = timedelta(0),
    processing_time: TtlTimeProvider | None = None,
    restore_from: str | None = None,
    output_table: str | None = None,
) -> KeyedRun:
    """Process ``df`` keyed by ``key`` with ``function`` as checkpoint ``checkpoint_id``.

    ``order_by`` fixes the processing order within each key (Spark's shuffle does not keep the
    input order). ``event_time`` names a timestamp (or epoch-millisecond) column: it becomes
    ``ctx.timestamp`` and drives the watermark (see the module docstring). ``processing_time``
    is the clock of TTL and processing-time timers (default: the system clock; it is pickled
    to the tasks). ``backend`` names the keyed state backend (``heap`` or ``rocksdb``) and
    ``backend_options`` configures it (``RocksDBOptions`` for ``rocksdb``). ``restore_from`` is
    a savepoint folder: the run starts from it instead of the job's latest checkpoint (the
    catalog may be empty).

    Without ``output_table`` the output comes back as a persisted DataFrame (unpersist it when
    done). With ``output_table`` (a Delta table path or URI) the tasks write the output there
    and it is committed exactly once with the checkpoint (see
    :mod:`statecore.snapshot.output`); the run's ``output`` then reads this checkpoint's rows
    from the table, also on a replay. This is the faster way: the rows never go back through
    Spark.
    """
    return _run(df, key=key, function=function, process=per_record,
                output_schema=output_schema, job=job, checkpoint_id=checkpoint_id,
                operator=operator, parallelism=parallelism, max_parallelism=max_parallelism,
                order_by=order_by, backend=backend, backend_options=backend_options,
                config=config, event_time=event_time, allowed_lateness=allowed_lateness,
                processing_time=processing_time, restore_from=restore_from,
                output_table=output_table)


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
    backend: str = "heap",
    backend_options: object = None,
    config: StatecoreConfig | None = None,
    processing_time: TtlTimeProvider | None = None,
    restore_from: str | None = None,
    output_table: str | None = None,
    batch_rows: int = 1_000_000,
) -> KeyedRun:
    """Like :func:`keyed_process`, with a vectorized ``function``
    (:class:`~statecore.vectorized.KeyedBatchFunction`): each task gathers Spark's Arrow batches
    into keyed batches of up to ``batch_rows`` rows, and the function reads and writes state
    once per distinct key and batch. The state, checkpoints and operations are the same as the
    per-record API's, so either API may continue the other's checkpoints. Vectorized functions
    have no timers and no event time.
    """
    if not isinstance(function, KeyedBatchFunction):
        raise ConfigError(f"{type(function).__name__} is not a KeyedBatchFunction; use "
                          "keyed_process for a KeyedProcessFunction")
    if batch_rows < 1:
        raise ConfigError(f"batch_rows must be positive, not {batch_rows}")
    return _run(df, key=key, function=function,
                process=functools.partial(per_batch, batch_rows=batch_rows),
                output_schema=output_schema, job=job, checkpoint_id=checkpoint_id,
                operator=operator, parallelism=parallelism, max_parallelism=max_parallelism,
                order_by=order_by, backend=backend, backend_options=backend_options,
                config=config, event_time=None, allowed_lateness=timedelta(0),
                processing_time=processing_time, restore_from=restore_from,
                output_table=output_table)


def _run(
    df: DataFrame, *, key: str, function: KeyedProcessFunction | KeyedBatchFunction,
    process: Callable[[TaskSpec], Process], output_schema: T.StructType, job: str,
    checkpoint_id: int, operator: str, parallelism: int | None, max_parallelism: int | None,
    order_by: list[str] | None, backend: str, backend_options: object,
    config: StatecoreConfig | None, event_time: str | None, allowed_lateness: timedelta,
    processing_time: TtlTimeProvider | None, restore_from: str | None,
    output_table: str | None,
) -> KeyedRun:
    """One run of either API: plan, check, process on the executors, commit."""
    _check_backend_options(backend, backend_options)
    config = config or StatecoreConfig.resolve()
    key_type = _key_info(df, key)
    spark = df.sparkSession
    catalog = Catalog.connect(config.catalog_url)
    try:
        if restore_from is not None and not _is_complete(catalog, job, checkpoint_id):
            restore_savepoint(config, catalog, restore_from, job=job, parallelism=parallelism)
        check_not_locked(catalog, job)
        coordinator = CheckpointCoordinator(config, catalog, job=job, operator=operator)
        planned = coordinator.plan(
            checkpoint_id, parallelism=parallelism, max_parallelism=max_parallelism,
            default_parallelism=spark.sparkContext.defaultParallelism,
        )
        time_zone = spark.conf.get("spark.sql.session.timeZone") or "UTC"
        arrow_output = to_arrow_schema(output_schema, timezone=time_zone)
        sink = None if output_table is None else OutputTable(
            output_table, arrow_output, app_id=f"statecore:{job}/{operator}")
        if planned.replayed:
            output = _committed_output(spark, sink, output_schema, checkpoint_id)
            return KeyedRun(output, catalog.get_checkpoint(job, checkpoint_id), True, 0)
        try:  # before any record is processed: the states' schemas, the watermark, the sink
            planned = coordinator.check_compatible(
                planned, _probe_states(function, key_type, planned, job, operator))
            watermark = _watermark(df, event_time, allowed_lateness)
            if sink is not None:
                sink.check_schema()
        except Exception as exc:
            _fail(catalog, job, checkpoint_id, exc)
            raise
        spec = TaskSpec(
            key=key, key_type=key_type, key_group_column=KEY_GROUP_COLUMN,
            parallelism=planned.parallelism, max_parallelism=planned.max_parallelism,
            checkpoint_id=planned.checkpoint_id, restore=planned.restore, job=job,
            operator=operator, backend_factory=BACKENDS[backend],
            backend_options=backend_options, home=config.home,
            table_uris=functools.partial(state_table_uri, config.warehouse, job, operator),
            output_schema=arrow_output, event_time=event_time, watermark=watermark,
            processing_time=processing_time, output_table=output_table,
        )
        aligned = align_to_key_groups(df, key, parallelism=planned.parallelism,
                                      max_parallelism=planned.max_parallelism, order_by=order_by)
        result_schema = T.StructType([*output_schema.fields, T.StructField(META, T.StringType())])
        result = aligned.mapInArrow(task_function(spec, function, process(spec)),
                                    result_schema)
        if sink is None:  # the output stays with Spark: computed once, kept for the caller
            result = result.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            metas = [json.loads(r[0]) for r in result.where(F.col(META).isNotNull())
                     .select(META).collect()]
        except Exception as exc:
            result.unpersist()
            _fail(catalog, job, checkpoint_id, exc)
            raise _task_error(exc, job, checkpoint_id) from exc
        if sink is not None:
            files = [OutputFile(**m["output"]) for m in metas if m.get("output")]
            try:
                if not sink.commit(files, checkpoint_id=checkpoint_id):
                    log.warning("job %s: the output of checkpoint %s was committed by an earlier "
                                "attempt; this attempt's output files were dropped", job,
                                checkpoint_id)
            except Exception as exc:
                _fail(catalog, job, checkpoint_id, exc)
                raise
        snapshots = [StateSnapshotResult.from_json_dict(s) for m in metas for s in m["states"]]
        record = coordinator.commit(planned, snapshots)
        records = sum(m["records"] for m in metas)
        restore = _sum_restore_metrics(metas)
        log.info("job %s: checkpoint %s complete (%d records, %d rows of state)", job,
                 checkpoint_id, records, record.total_rows)
        if planned.restore.checkpoint_id is not None:
            log.info("job %s: restored checkpoint %s with the %s backend: %d key groups reused "
                     "local state, %d rows ingested", job, planned.restore.checkpoint_id,
                     backend, restore.get("reused_key_groups", 0),
                     restore.get("ingested_rows", 0))
        if sink is None:
            output = result.where(F.col(META).isNull()).drop(META)
        else:
            output = _committed_output(spark, sink, output_schema, checkpoint_id)
        return KeyedRun(output, record, False, records, restore)
    finally:
        catalog.close()


def _committed_output(spark: SparkSession, sink: OutputTable | None,
                      output_schema: T.StructType, checkpoint_id: int) -> DataFrame:
    """The rows of ``checkpoint_id`` in the output table (none without an output table)."""
    uris = [] if sink is None else sink.checkpoint_files(checkpoint_id)
    if not uris:
        return spark.createDataFrame([], output_schema)
    return spark.read.schema(output_schema).parquet(*uris)


def _fail(catalog: Catalog, job: str, checkpoint_id: int, exc: Exception) -> None:
    catalog.fail_checkpoint(job, checkpoint_id, error=f"{type(exc).__name__}: {exc}")


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


def _sum_restore_metrics(metas: list[dict[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {"tasks": len(metas)}
    for meta in metas:
        for name, value in meta.get("restore", {}).items():
            total[name] = total.get(name, 0) + int(value)
    return total
