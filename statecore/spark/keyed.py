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
starts at the restored watermark, and its checkpoint completes with the watermark its
tasks' event times allow (see :func:`next_watermark`), which the next micro-batch starts from.
Inside a task, with an event time, the records come in event-time order across its keys
(``order_by``, then the key, breaking ties) and the task's watermark advances between them to
the largest event time seen minus ``allowed_lateness`` minus 1 ms (Flink's
bounded-out-of-orderness rule): every event-time timer it passes fires before the next record,
so a replay fires the same timers at the same places. Processing-time timers due by the end of
a run fire in it.

A batch run given ``end_of_input=True`` ends a bounded input, as Flink does when its source
finishes: the run completes with the watermark at ``MAX_WATERMARK``, so every event-time timer
fires in it, and the job takes no further records (a later run is refused). The default is
"more input follows" (a daily batch).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from statecore.backends.registry import BackendParameters
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.runtime.functions import KeyedProcessFunction
from statecore.runtime.vectorized import KeyedBatchFunction
from statecore.snapshot.changelog import ChangelogConfig
from statecore.spark.executor import per_batch, per_record
from statecore.spark.job import KeyedJob, KeyedRun, SideOutput, SideOutputs
from statecore.spark.runner import KeyedRunner
from statecore.spark.watermark import next_watermark
from statecore.ttl.time import TtlTimeProvider

__all__ = [
    "KeyedJob",
    "KeyedRun",
    "SideOutput",
    "keyed_process",
    "keyed_process_batches",
    "next_watermark",
]

_KeyedRunner = KeyedRunner
"""The runner under its former name (:mod:`statecore.spark.stream` imports it)."""


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
    end_of_input: bool = False,
    processing_timers_at_end: bool = False,
    processing_time: TtlTimeProvider | None = None,
    restore_from: str | None = None,
    force_restore: bool = False,
    output_table: str | None = None,
    input_fingerprint: str | Mapping[str, Any] | None = None,
    changelog: bool | ChangelogConfig = False,
    late_output_table: str | None = None,
    side_outputs: SideOutputs | None = None,
    retain_checkpoints: int | None = None,
    late_data: str | None = None,
) -> KeyedRun:
    """Process ``df`` keyed by ``key`` with ``function`` as checkpoint ``checkpoint_id``.

    ``order_by`` fixes the processing order within each key (Spark's shuffle does not keep the
    input order). ``event_time`` names a timestamp (or epoch-millisecond) column: it becomes
    ``ctx.timestamp`` and drives the watermark (see the module docstring). ``processing_time``
    is the clock of TTL and processing-time timers (default: the system clock; it is pickled
    to the tasks). ``backend`` names the keyed state backend (``heap`` or ``rocksdb``) and
    ``backend_options`` configures it (``RocksDBOptions`` for ``rocksdb``); or ``backend`` is a
    :class:`~statecore.backends.BackendParameters` holding both. ``restore_from`` is
    a savepoint, a name among the job's savepoints (a pin restores without copying) or an
    export's folder (the catalog may be empty): the run starts from it instead of the job's
    latest checkpoint; a savepoint older than that checkpoint is refused unless
    ``force_restore``.

    Without ``output_table`` the output comes back as a DataFrame of the persisted result
    (``run.unpersist()`` when done). With ``output_table`` (a Delta table path or URI) the
    tasks write the output there and it is committed exactly once with the checkpoint (see
    :mod:`statecore.snapshot.output`); the run's ``output`` then reads this checkpoint's rows
    from the table, also on a replay. This is the faster way: the rows never go back through
    Spark. Late records (event time at or below the restored watermark) reach the function like
    any other, as in Flink (``late_data="process"``, the default; compare ``ctx.timestamp`` with
    ``ctx.timer_service.current_watermark()`` to treat them apart). The statecore extensions
    keep them away from state: ``late_data="drop"`` drops them, ``late_output_table`` (a Delta
    path; ``late_data="table"``) appends them there, in the input's columns, exactly once with
    the checkpoint. Every mode counts them (``KeyedRun.late_rows``).

    ``side_outputs`` gives each side output the function emits to (``ctx.output(tag, value)``,
    ``tag`` a :class:`~statecore.runtime.side_outputs.OutputTag`) its own Delta table: per tag
    or tag name, a :class:`SideOutput` (``table``, and the ``schema`` of its rows, each value a
    tuple in its fields' order) committed exactly once with the checkpoint as ``output_table``
    is, or ``None`` to drop the tag's values. A value for a tag not given fails the run
    (:class:`~statecore.errors.ConfigError`) before anything of it is committed.

    A run holds the job's lease (a second writer fails with :class:`ConcurrentRunError`), its
    ``checkpoint_id`` must not be below the latest completed one (:class:`CheckpointOrderError`),
    and a replay of a completed id must carry the same input (:class:`ReplayMismatchError`):
    ``input_fingerprint`` names it (a string, or e.g. ``{"batch_id": ..., "offsets": ...}`` of a
    streaming micro-batch); by default it is a fingerprint of ``df.inputFiles()`` (paths, sizes,
    modification times) when the input is files, else a digest of its rows (one Spark job).

    ``end_of_input=True`` declares this run's input the last of a bounded input: every
    event-time timer fires (the watermark ends at ``MAX_WATERMARK``), and a later run of the job
    is refused with :class:`~statecore.errors.ConfigError`. With it,
    ``processing_timers_at_end=True`` fires every processing-time timer too, after the
    event-time ones, as Flink's ``BATCH`` mode does at the end of input (each task fires its
    timers up to the latest one's time; a timer registered later than that while they fire
    stays, as Flink ignores timers registered at that point).

    ``changelog`` (``True`` or a :class:`~statecore.snapshot.changelog.ChangelogConfig`) makes
    each checkpoint write the changed keys as change files instead of whole key groups (see
    docs/changelog.md).
    ``retain_checkpoints=N`` bounds the job's catalog rows, as a stream needs: once the
    checkpoint completed, the run keeps the job's last ``N`` completed checkpoints, expires the
    older ones and deletes expired rows beyond ``N`` (:mod:`statecore.checkpoint.retain`; an id
    whose row was deleted is then refused with :class:`CheckpointOrderError`, not replayed).
    Files are only deleted by VACUUM (``statecore retention``).
    """
    return KeyedRunner(
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
            end_of_input=end_of_input,
            processing_timers_at_end=processing_timers_at_end,
            processing_time=processing_time,
            restore_from=restore_from,
            force_restore=force_restore,
            output_table=output_table,
            input_fingerprint=input_fingerprint,
            changelog=ChangelogConfig.of(changelog),
            late_output_table=late_output_table,
            side_outputs=side_outputs,
            late_data=late_data,
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
    return KeyedRunner(
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
