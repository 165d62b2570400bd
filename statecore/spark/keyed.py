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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa
from pyspark import StorageLevel, TaskContext, cloudpickle
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from statecore.backends import HeapKeyedStateBackend, KeyedStateBackend, TaskScope
from statecore.catalog import Catalog, CheckpointRecord, CheckpointStatus
from statecore.checkpoint import CheckpointCoordinator, PlannedCheckpoint
from statecore.config import StatecoreConfig
from statecore import errors
from statecore.errors import ConfigError
from statecore.keygroups import compute_key_group_range_for_operator_index
from statecore.maintenance import check_not_locked
from statecore.runtime import KeyedProcessFunction
from statecore.savepoint import restore_savepoint
from statecore.snapshot import state_table_uri
from statecore.spark.partitioning import KEY_GROUP_COLUMN, align_to_key_groups, key_column
from statecore.task import (
    KeyedOperatorTask,
    StateSchema,
    StateSnapshotResult,
    TableUris,
    probe_states,
)
from statecore.timers import MIN_WATERMARK
from statecore.ttl.time import TtlTimeProvider
from statecore.types import TypeInfo

__all__ = ["KeyedRun", "keyed_process", "BACKENDS"]

log = logging.getLogger(__name__)

_META = "__statecore_snapshot"

BackendFactory = Callable[..., KeyedStateBackend]
"""``factory(key_type=, key_group_range=, max_parallelism=, restore_source=, ttl_time_provider=,
scope=, options=)``: the backend contract's arguments, the task's scope and the job's options."""


def _heap_backend(*, scope: TaskScope, options: object = None,
                  **contract: Any) -> KeyedStateBackend:
    return HeapKeyedStateBackend(**contract)


def _rocksdb_backend(*, scope: TaskScope, options: object = None,
                     **contract: Any) -> KeyedStateBackend:
    from statecore.backends.rocksdb import RocksDBKeyedStateBackend

    return RocksDBKeyedStateBackend(scope=scope, options=options,  # type: ignore[arg-type]
                                    **contract)


BACKENDS: dict[str, BackendFactory] = {"heap": _heap_backend, "rocksdb": _rocksdb_backend}
"""The keyed state backends a job may select by name."""


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


def _probe_states(function: KeyedProcessFunction, key_type: TypeInfo,
                  planned: PlannedCheckpoint, job: str, operator: str) -> list[StateSchema]:
    """The states a copy of the function registers (the function itself ships untouched)."""
    probe: KeyedProcessFunction = cloudpickle.loads(
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
) -> KeyedRun:
    """Process ``df`` keyed by ``key`` with ``function`` as checkpoint ``checkpoint_id``.

    ``order_by`` fixes the processing order within each key (Spark's shuffle does not keep the
    input order). ``event_time`` names a timestamp (or epoch-millisecond) column: it becomes
    ``ctx.timestamp`` and drives the watermark (see the module docstring). ``processing_time``
    is the clock of TTL and processing-time timers (default: the system clock; it is pickled
    to the tasks). ``backend`` names the keyed state backend (``heap`` or ``rocksdb``) and
    ``backend_options`` configures it (``RocksDBOptions`` for ``rocksdb``). ``restore_from`` is
    a savepoint folder: the run starts from it instead of the job's latest checkpoint (the
    catalog may be empty). The output is persisted; unpersist it when done.
    """
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
        if planned.replayed:
            empty = spark.createDataFrame([], output_schema)
            return KeyedRun(empty, catalog.get_checkpoint(job, checkpoint_id), True, 0)
        try:  # before any record is processed: the states' schemas, the watermark
            planned = coordinator.check_compatible(
                planned, _probe_states(function, key_type, planned, job, operator))
            watermark = _watermark(df, event_time, allowed_lateness)
        except Exception as exc:
            catalog.fail_checkpoint(job, checkpoint_id, error=f"{type(exc).__name__}: {exc}")
            raise
        table_uris = functools.partial(state_table_uri, config.warehouse, job, operator)

        aligned = align_to_key_groups(df, key, parallelism=planned.parallelism,
                                      max_parallelism=planned.max_parallelism, order_by=order_by)
        run_task = _task_function(
            function, key=key, key_type=key_type, planned=planned, job=job, operator=operator,
            backend_factory=BACKENDS[backend], backend_options=backend_options,
            home=config.home, table_uris=table_uris,
            output_schema=output_schema, event_time=event_time, watermark=watermark,
            processing_time=processing_time,
            time_zone=spark.conf.get("spark.sql.session.timeZone") or "UTC",
        )
        result_schema = T.StructType([*output_schema.fields, T.StructField(_META, T.StringType())])
        result = aligned.mapInArrow(run_task, result_schema).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            metas = [json.loads(r[0]) for r in result.where(F.col(_META).isNotNull())
                     .select(_META).collect()]
        except Exception as exc:
            result.unpersist()
            catalog.fail_checkpoint(job, checkpoint_id, error=f"{type(exc).__name__}: {exc}")
            raise _task_error(exc, job, checkpoint_id) from exc
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
        output = result.where(F.col(_META).isNull()).drop(_META)
        return KeyedRun(output, record, False, records, restore)
    finally:
        catalog.close()


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


def _task_function(
    function: KeyedProcessFunction, *, key: str, key_type: TypeInfo, planned: PlannedCheckpoint,
    job: str, operator: str, backend_factory: BackendFactory, backend_options: object,
    home: str, table_uris: TableUris,
    output_schema: T.StructType, time_zone: str, event_time: str | None, watermark: int,
    processing_time: TtlTimeProvider | None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    p, max_p = planned.parallelism, planned.max_parallelism
    restore = planned.restore
    checkpoint_id = planned.checkpoint_id
    out_names = [f.name for f in output_schema.fields]
    arrow_out = to_arrow_schema(output_schema, timezone=time_zone)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        result_schema = arrow_out.append(pa.field(_META, pa.string()))
        index = TaskContext.get().partitionId()  # type: ignore[union-attr]
        key_groups = compute_key_group_range_for_operator_index(max_p, p, index)
        scope = TaskScope(
            job=job, operator=operator, subtask_index=index, checkpoint_id=checkpoint_id,
            home=home, restored_checkpoint_id=restore.checkpoint_id,
            restored_files=restore.file_paths(key_groups),
            restore_source_for=lambda kgs: restore.source(kgs, key_type),
        )
        backend = backend_factory(key_type=key_type, key_group_range=key_groups,
                                  max_parallelism=max_p,
                                  restore_source=restore.source(key_groups, key_type),
                                  ttl_time_provider=processing_time, scope=scope,
                                  options=backend_options)
        task = KeyedOperatorTask(function, backend, job=job, operator=operator,
                                 subtask_index=index, parallelism=p, restore=restore)
        try:
            task.open()
            for batch in batches:
                rows = task.process_batch(batch, key=key, key_group=KEY_GROUP_COLUMN,
                                          event_time=event_time)
                if rows:
                    yield _to_batch(rows, arrow_out, result_schema, out_names)
            rows = task.advance_watermark(watermark) + task.advance_processing_time()
            if rows:
                yield _to_batch(rows, arrow_out, result_schema, out_names)
            snapshot = task.snapshot(table_uris, checkpoint_id=checkpoint_id)
            restored = backend.restore_metrics()
        except BaseException:
            backend.close()  # a failed attempt must not keep its local state open
            raise
        task.close()
        meta = json.dumps({"subtask": index, "records": task.records, "restore": restored,
                           "states": [s.to_json_dict() for s in snapshot]})
        columns: list[Any] = [pa.nulls(1, f.type) for f in arrow_out] + [pa.array([meta])]
        yield pa.RecordBatch.from_arrays(columns, schema=result_schema)

    return run


def _sum_restore_metrics(metas: list[dict[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {"tasks": len(metas)}
    for meta in metas:
        for name, value in meta.get("restore", {}).items():
            total[name] = total.get(name, 0) + int(value)
    return total


def _to_batch(rows: list[Any], arrow_out: pa.Schema, result_schema: pa.Schema,
              names: list[str]) -> pa.RecordBatch:
    columns = list(zip(*rows)) if rows else [() for _ in names]
    if len(columns) != len(names):
        raise ConfigError(f"output rows have {len(columns)} fields, the output schema {names}")
    arrays = [pa.array(c, type=f.type) for c, f in zip(columns, arrow_out)]
    arrays.append(pa.nulls(len(rows), pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=result_schema)
