"""``keyed_stream``: a Structured Streaming query whose micro-batches are keyed checkpoints.

Each micro-batch runs the same keyed runtime as :func:`~statecore.spark.keyed.keyed_process`
(restore, process, snapshot, commit) from ``foreachBatch``, as checkpoint ``base + batch_id``
with the input identity ``{"batch_id": batch_id, "offsets": {"start": ..., "end": ...}}``, the
data sources' offsets of the micro-batch from Spark's offset log (``offsets/<batch id>`` and the
one before; a Kafka source's are ``{topic: {partition: offset}}``, a file source's
``{"logOffset": n}``): Spark replays a micro-batch whose commit it did not record (after a
driver crash) with the same id and the same offsets, and the replay of a completed checkpoint
is a no-op, so state and output tables change exactly once per micro-batch; the same id with
other offsets (a checkpoint location rebuilt under the same job) is refused
(:class:`~statecore.errors.ReplayMismatchError`). ``base`` is
0 for a job without checkpoints (the checkpoint id *is* the batch id); a stream that continues
the state of a batch job starts above that job's latest checkpoint id. It is fixed when the query
first starts and kept in ``<checkpoint_location>/statecore.json``, beside Spark's offsets.

A new query may start from a savepoint instead of the job's latest checkpoint (``restore_from``,
Flink's stop-with-savepoint and start from it): the savepoint is fixed with the base when the
query first starts (a checkpoint location of a query started otherwise is refused), and each
micro-batch before the query's first completed checkpoint restores it (a replay of micro-batch 0
after a crash restores it again); later micro-batches continue from the one before. A savepoint
keeps the source offsets of the micro-batch it was taken after, and :func:`savepoint_offsets`
gives them as the Kafka source's ``startingOffsets``, so the new query reads on where the
savepoint's state ends.

Event time follows Spark's rule: micro-batch *n* starts at the watermark its restored checkpoint
completed with (inside it each task's watermark advances between records, see
:mod:`statecore.spark.keyed`), and completes with the smallest of its tasks' largest event
times minus ``allowed_lateness`` (never lower). The watermark is computed from what the tasks
report, never by a second Spark job over the input. Records at or below the watermark are late
(:mod:`statecore.runtime.lateness`).

Processing-time timers fire in the first micro-batch after they are due. With a
``processingTime`` trigger the query also reads Spark's ``rate`` source (one row a second), so a
micro-batch runs every trigger even when no data arrives; a micro-batch with no records and no
timer due is skipped without a checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.query import StreamingQuery

from statecore.backends.registry import BackendParameters
from statecore.catalog import Catalog
from statecore.checkpoint.points import RestorePoint, is_savepoint_name, savepoint_point
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.ops import streams
from statecore.ops.savepoint import check_restore
from statecore.runtime.functions import KeyedProcessFunction
from statecore.runtime.vectorized import KeyedBatchFunction
from statecore.snapshot.changelog import ChangelogConfig
from statecore.snapshot.files import table_filesystem
from statecore.spark.executor import per_batch, per_record
from statecore.spark.host_lifetime import stop_hosts_with
from statecore.spark.host_stop import stop_marker_uri
from statecore.spark.job import SideOutputs
from statecore.spark.keyed import KeyedJob, KeyedRun, _KeyedRunner
from statecore.spark.offsets import batch_offsets, data_moved, savepoint_offsets
from statecore.ttl.time import TtlTimeProvider

__all__ = [
    "STREAM_METADATA",
    "batch_offsets",
    "every_task_runs",
    "keyed_stream",
    "keyed_stream_batches",
    "savepoint_offsets",
]

log = logging.getLogger(__name__)

STREAM_METADATA = streams.STREAM_METADATA
"""The file in the query's checkpoint location that fixes its checkpoint id base."""

_TICK = "__statecore_tick"
"""The column that marks the ``rate`` source's rows (ticks) in a ``processingTime`` query."""

DEFAULT_RETAINED = 10
"""Completed checkpoints a stream keeps by default (older ones expire; their rows go)."""

_TRIGGERS = {"processingTime": str, "once": bool, "availableNow": bool}

_EXCLUDED_RULES = "spark.sql.adaptive.optimizer.excludedRules"
_EMPTY_RELATION_RULE = "org.apache.spark.sql.execution.adaptive.AQEPropagateEmptyRelation"
"""Adaptive execution replaces an empty shuffle by an empty relation, and then no task runs:
a micro-batch without records would fire no timer. The stream's session excludes the rule."""


def keyed_stream(
    stream_df: DataFrame,
    *,
    key: str,
    function: KeyedProcessFunction,
    output_schema: T.StructType,
    job: str,
    checkpoint_location: str,
    trigger: dict[str, Any] | None = None,
    output_table: str | None = None,
    late_output_table: str | None = None,
    side_outputs: SideOutputs | None = None,
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
    query_name: str | None = None,
    changelog: bool | ChangelogConfig = True,
    retain_checkpoints: int | None = DEFAULT_RETAINED,
    live_lookups: bool = False,
    late_data: str | None = None,
    restore_from: str | None = None,
    force_restore: bool = False,
    warm_hosts: bool = True,
) -> StreamingQuery:
    """Start a streaming query that runs ``function`` keyed by ``key`` over ``stream_df``.

    The arguments are those of :func:`~statecore.spark.keyed.keyed_process`, plus Spark's:
    ``checkpoint_location`` holds the query's offsets (statecore's state lives in the catalog
    and warehouse, as for batch); ``trigger`` is passed to ``DataStreamWriter.trigger``
    (``{"availableNow": True}``, ``{"processingTime": "5 seconds"}``; ``None``: Spark's
    default); ``query_name`` names the query. Output rows go to ``output_table`` (a Delta path,
    appended exactly once per micro-batch); without it they are dropped. Late records reach the
    function, go to ``late_output_table`` (input columns) or are dropped, as ``late_data`` says
    (see ``keyed_process``). ``changelog`` is on by
    default for a stream: a micro-batch writes the keys it changed, not whole key groups (see
    :mod:`statecore.snapshot.changelog`; ``False`` turns it off). A stream keeps its last
    ``retain_checkpoints`` completed checkpoints (default :data:`DEFAULT_RETAINED`; ``None``:
    all), so its catalog rows stay bounded (see ``keyed_process``). With ``live_lookups`` the
    tasks serve reads of their current state (``statecore.query.lookup(..., live=True)``, see
    :mod:`statecore.runtime.live`). ``restore_from`` is a savepoint folder a new query starts
    from instead of the job's latest checkpoint (see the module; read its Kafka source from
    :func:`savepoint_offsets`); as for ``keyed_process``, a savepoint older than the job's
    latest checkpoint is refused unless ``force_restore``. With ``warm_hosts`` (the default)
    each subtask's task runs in the subtask's warm state host on its executor, so that its
    state stays warm whichever Python worker Spark picks (:mod:`statecore.spark.host`);
    ``False`` runs it in the worker, which keeps it warm only when Spark picks that worker
    again. Arguments are checked
    (:class:`~statecore.errors.ConfigError`), and the savepoint against the job, before the
    query starts.
    """
    if not isinstance(function, KeyedProcessFunction):
        raise ConfigError(
            f"{type(function).__name__} is not a KeyedProcessFunction; use "
            "keyed_stream_batches for a KeyedBatchFunction"
        )
    template = KeyedJob(
        key=key,
        function=function,
        process=per_record,
        output_schema=output_schema,
        job=job,
        checkpoint_id=0,
        operator=operator,
        parallelism=parallelism,
        max_parallelism=max_parallelism,
        order_by=order_by,
        backend=BackendParameters.of(backend, backend_options),
        config=config,
        event_time=event_time,
        allowed_lateness=allowed_lateness,
        processing_time=processing_time,
        output_table=output_table,
        late_output_table=late_output_table,
        side_outputs=side_outputs,
        late_data=late_data,
        stream=True,
        changelog=ChangelogConfig.of(changelog),
        retain_checkpoints=retain_checkpoints,
        live_lookups=live_lookups,
        restore_from=restore_from,
        force_restore=force_restore,
        warm_hosts=warm_hosts,
    )
    return _start(stream_df, template, checkpoint_location, trigger, query_name, ticks=True)


def keyed_stream_batches(
    stream_df: DataFrame,
    *,
    key: str,
    function: KeyedBatchFunction,
    output_schema: T.StructType,
    job: str,
    checkpoint_location: str,
    trigger: dict[str, Any] | None = None,
    output_table: str | None = None,
    operator: str = "main",
    parallelism: int | None = None,
    max_parallelism: int | None = None,
    order_by: list[str] | None = None,
    backend: str | BackendParameters = "heap",
    backend_options: object = None,
    config: StatecoreConfig | None = None,
    processing_time: TtlTimeProvider | None = None,
    batch_rows: int = 1_000_000,
    query_name: str | None = None,
    changelog: bool | ChangelogConfig = True,
    retain_checkpoints: int | None = DEFAULT_RETAINED,
    live_lookups: bool = False,
    restore_from: str | None = None,
    force_restore: bool = False,
    warm_hosts: bool = True,
) -> StreamingQuery:
    """Like :func:`keyed_stream`, with a vectorized ``function`` (as
    :func:`~statecore.spark.keyed.keyed_process_batches`: no timers, no event time)."""
    if not isinstance(function, KeyedBatchFunction):
        raise ConfigError(
            f"{type(function).__name__} is not a KeyedBatchFunction; use "
            "keyed_stream for a KeyedProcessFunction"
        )
    if batch_rows < 1:
        raise ConfigError(f"batch_rows must be positive, not {batch_rows}")
    template = KeyedJob(
        key=key,
        function=function,
        process=functools.partial(per_batch, batch_rows=batch_rows),
        output_schema=output_schema,
        job=job,
        checkpoint_id=0,
        operator=operator,
        parallelism=parallelism,
        max_parallelism=max_parallelism,
        order_by=order_by,
        backend=BackendParameters.of(backend, backend_options),
        config=config,
        processing_time=processing_time,
        output_table=output_table,
        stream=True,
        changelog=ChangelogConfig.of(changelog),
        retain_checkpoints=retain_checkpoints,
        live_lookups=live_lookups,
        restore_from=restore_from,
        force_restore=force_restore,
        warm_hosts=warm_hosts,
    )
    return _start(stream_df, template, checkpoint_location, trigger, query_name, ticks=False)


def _check_trigger(job: str, trigger: dict[str, Any] | None) -> None:
    if trigger is None:
        return
    if not isinstance(trigger, dict) or len(trigger) != 1:
        raise ConfigError(
            f"job {job!r}: trigger must be a dict of one of {sorted(_TRIGGERS)}, e.g. "
            f'{{"availableNow": True}} or {{"processingTime": "5 seconds"}}; got {trigger!r}'
        )
    ((name, value),) = trigger.items()
    if name == "continuous":
        raise ConfigError(
            f"job {job!r}: a continuous trigger has no micro-batches, so no checkpoints; use "
            "processingTime"
        )
    kind = _TRIGGERS.get(name)
    if kind is None or not isinstance(value, kind) or (kind is bool and value is not True):
        raise ConfigError(
            f"job {job!r}: trigger {trigger!r} is not one of "
            '{"processingTime": "<interval>"}, {"availableNow": True}, {"once": True}'
        )


def _start(
    stream_df: DataFrame,
    template: KeyedJob,
    checkpoint_location: str,
    trigger: dict[str, Any] | None,
    query_name: str | None,
    *,
    ticks: bool,
) -> StreamingQuery:
    """Check everything on the driver, fix the checkpoint id base, start the query."""
    if not isinstance(stream_df, DataFrame) or not stream_df.isStreaming:
        raise ConfigError(
            f"job {template.job!r}: keyed_stream needs a streaming DataFrame "
            "(spark.readStream...); for a batch DataFrame use keyed_process"
        )
    if not checkpoint_location or not isinstance(checkpoint_location, str):
        raise ConfigError(
            f"job {template.job!r}: checkpoint_location (the query's offsets) is required"
        )
    _check_trigger(template.job, trigger)
    if _TICK in stream_df.columns:
        raise ConfigError(f"job {template.job!r}: the column name {_TICK!r} is reserved")
    runner = _KeyedRunner(stream_df, template)  # a run's checks: names, key, order_by, event time
    config = template.config or StatecoreConfig.resolve()
    with Catalog.connect(config.catalog_url) as catalog:  # one writer per output table
        runner.bind_outputs(catalog)
    base, restore_from = _query_start(config, template, checkpoint_location)
    template = dataclasses.replace(template, config=config, restore_from=None, force_restore=False)
    source = stream_df
    ticking = ticks and trigger is not None and "processingTime" in trigger
    if ticking:
        source = _with_ticks(stream_df)
    micro_batch = _MicroBatch(
        template,
        base,
        tick=ticking,
        checkpoint_location=checkpoint_location,
        restore_from=restore_from,
    )
    writer = (
        source.writeStream.foreachBatch(micro_batch)
        .option("checkpointLocation", checkpoint_location)
        .queryName(query_name or f"statecore:{template.job}/{template.operator}")
    )
    if trigger is not None:
        writer = writer.trigger(**trigger)
    log.info(
        "job %s: starting a stream (checkpoint ids %d + batch id, offsets in %s%s)",
        template.job,
        base,
        checkpoint_location,
        "" if restore_from is None else f", state from savepoint {restore_from}",
    )
    query = writer.start()
    if template.warm_hosts and not template.live_lookups:
        # With live lookups the hosts serve the last micro-batch's state after the query ends
        # (as after a failure), until they are idle (STATECORE_HOST_IDLE_SECONDS).
        stop_hosts_with(
            stream_df.sparkSession,
            query,
            template.job,
            template.operator,
            last_checkpoint=lambda: micro_batch.last_checkpoint,
            marker=stop_marker_uri(config.warehouse, template.job, template.operator),
        )
    return query


def _with_ticks(stream_df: DataFrame) -> DataFrame:
    """``stream_df`` and Spark's ``rate`` source (one row a second, marked in ``_TICK``)."""
    spark = stream_df.sparkSession
    rate = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
    ticks = rate.select(
        *[F.lit(None).cast(f.dataType).alias(f.name) for f in stream_df.schema.fields],
        F.lit(True).alias(_TICK),
    )
    return stream_df.withColumn(_TICK, F.lit(None).cast("boolean")).unionByName(ticks)


def _query_start(
    config: StatecoreConfig, template: KeyedJob, checkpoint_location: str
) -> tuple[int, str | None]:
    """The query's checkpoint id base and the savepoint it starts from (``None``: the job's
    latest checkpoint), read from the checkpoint location, or fixed now and written there: the
    base is 0 for a new job, else above its latest checkpoint; a savepoint is checked against
    the job first (as a restore checks it, see :func:`~statecore.ops.savepoint.check_restore`)."""
    job, restore_from = template.job, template.restore_from
    restore_from = None if restore_from is None else restore_from.rstrip("/")
    fs, root = table_filesystem(checkpoint_location.rstrip("/"))
    path = f"{root}/{STREAM_METADATA}"
    try:
        with fs.open_input_stream(path) as stream:
            data = json.loads(stream.read())
    except FileNotFoundError:
        data = None
    if data is not None:
        if data.get("job") != job:
            raise ConfigError(
                f"checkpoint location {checkpoint_location} belongs to the stream of job "
                f"{data.get('job')!r}, not {job!r}: give each query its own location"
            )
        started_from = data.get("restore_from")
        if restore_from is not None and restore_from != started_from:
            raise ConfigError(
                f"job {job!r}: checkpoint location {checkpoint_location} belongs to a query "
                "that started from "
                + ("the job's latest checkpoint" if started_from is None else started_from)
                + f", and Spark continues it from its offsets; to start from {restore_from}, "
                "give the new query a new checkpoint location"
            )
        return int(data["checkpoint_id_base"]), started_from
    with Catalog.connect(config.catalog_url) as catalog:
        latest = catalog.highest_completed_id(job) if catalog.has_job(job) else None
        if restore_from is not None:
            check_restore(
                config,
                catalog,
                _savepoint_of(catalog, restore_from, job),
                force=template.force_restore,
            )
    base = 0 if latest is None else latest + 1
    data = {"job": job, "checkpoint_id_base": base}
    if restore_from is not None:
        data["restore_from"] = restore_from
    fs.create_dir(root, recursive=True)
    with fs.open_output_stream(f"{path}.tmp") as out:
        out.write(json.dumps(data).encode())
    fs.move(f"{path}.tmp", path)
    return base, restore_from


def _savepoint_of(catalog: Catalog, path: str, job: str) -> RestorePoint:
    """The savepoint at ``path`` as a restore point of ``job`` (from an unknown checkpoint when
    it is another job's), as a restore takes it."""
    if is_savepoint_name(path):  # one of the job's own: a pin or an export
        return savepoint_point(catalog, job, path)
    point = savepoint_point(catalog, job, path)
    if point.job == job:
        return point
    return dataclasses.replace(point.for_job(job), checkpoint_id=None)


class _MicroBatch:
    """The ``foreachBatch`` function: one keyed run per micro-batch (see the module)."""

    def __init__(
        self,
        template: KeyedJob,
        base: int,
        *,
        tick: bool,
        checkpoint_location: str = "",
        restore_from: str | None = None,
    ) -> None:
        self.template = template
        self.base = base
        self.tick = tick
        self.checkpoint_location = checkpoint_location
        self.restore_from = restore_from
        """The savepoint the query starts from, until it completed a checkpoint."""
        self.next_timer: int | None = None
        """The earliest pending processing-time timer after the last run (``None``: unknown
        or none; after a restart it is unknown, so the first micro-batch runs)."""
        self.known = False
        self.last_run: KeyedRun | None = None
        self.last_checkpoint: int | None = None
        """The checkpoint id of the last micro-batch this query began (its hosts' last)."""

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        template = self.template
        if self.tick:
            if self._idle(df, batch_id):
                log.debug("job %s: micro-batch %d has nothing to do", template.job, batch_id)
                return
            df = df.where(F.col(_TICK).isNull()).drop(_TICK)
        _run_every_task(df)
        fingerprint: dict[str, Any] = {"batch_id": batch_id}
        offsets = batch_offsets(self.checkpoint_location, batch_id, ticks=self.tick)
        if offsets is not None:
            fingerprint["offsets"] = offsets
        self.last_checkpoint = self.base + batch_id
        job = dataclasses.replace(
            template, checkpoint_id=self.last_checkpoint, input_fingerprint=fingerprint
        )
        if self.restore_from is not None and not self._checkpointed():
            # checked when the query first started; what it discards since are the restores of
            # the attempts before (a replay of micro-batch 0 restores the savepoint again)
            job = dataclasses.replace(job, restore_from=self.restore_from, force_restore=True)
        run = _KeyedRunner(df, job).run()
        run.unpersist()
        self.restore_from = None
        self.known = not run.replayed
        self.next_timer = run.next_processing_timer
        self.last_run = run

    def _checkpointed(self) -> bool:
        """Whether the query completed a checkpoint (its ids are ``base`` and above)."""
        config = self.template.config or StatecoreConfig.resolve()
        with Catalog.connect(config.catalog_url) as catalog:
            job = self.template.job
            latest = catalog.highest_completed_id(job) if catalog.has_job(job) else None
        return latest is not None and latest >= self.base

    def _idle(self, df: DataFrame, batch_id: int) -> bool:
        """No records and no processing-time timer due (known from the last run). Whether the
        micro-batch has records comes from Spark's offset log when it can (no Spark job), else
        from a job over the micro-batch."""
        if not self.known:
            return False
        if self.next_timer is not None:
            provider = self.template.processing_time
            now = _now_ms() if provider is None else provider.current_timestamp()
            if self.next_timer <= now:
                return False
        moved = data_moved(self.checkpoint_location, batch_id)
        if moved is not None:
            return not moved
        return df.where(F.col(_TICK).isNull()).isEmpty()


def _run_every_task(df: DataFrame) -> None:
    """Every task runs, with records or without (see :data:`_EMPTY_RELATION_RULE`); set on the
    micro-batch's session (Spark's clone of the session that started the query)."""
    _exclude_empty_relation_rule(df.sparkSession.conf)


@contextlib.contextmanager
def every_task_runs(spark: SparkSession) -> Iterator[None]:
    """Within it, every task of ``spark``'s jobs runs, with records or without (as for each
    micro-batch of a stream: a run on no records that must fire every subtask's timers); the
    session's setting is as before afterwards."""
    conf = spark.conf
    before = conf.get(_EXCLUDED_RULES, None)
    _exclude_empty_relation_rule(conf)
    try:
        yield
    finally:
        if before is None:
            conf.unset(_EXCLUDED_RULES)
        else:
            conf.set(_EXCLUDED_RULES, before)


def _exclude_empty_relation_rule(conf: Any) -> None:
    rules = [r for r in (conf.get(_EXCLUDED_RULES, None) or "").split(",") if r]
    if _EMPTY_RELATION_RULE not in rules:
        conf.set(_EXCLUDED_RULES, ",".join([*rules, _EMPTY_RELATION_RULE]))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
