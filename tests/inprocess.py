"""Run a keyed operator's checkpoints in-process: the driver and task steps of ``keyed_process``
(plan, schema check, one task per subtask, commit) on real Delta tables and a real catalog,
without Spark."""

from __future__ import annotations

import contextlib
import copy
import functools
import time
from collections.abc import Sequence
from typing import Any

from statecore.backends import HeapKeyedStateBackend
from statecore.backends.base import KeyedStateBackend
from statecore.backends.timers import MIN_WATERMARK
from statecore.catalog import Catalog, CheckpointRecord
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.checkpoint.retain import retain_checkpoints as retain
from statecore.config import StatecoreConfig
from statecore.keygroups import assign_to_key_group, compute_key_group_range_for_operator_index
from statecore.runtime import KeyedProcessFunction
from statecore.runtime.latency import LatencyTracking, latency_percentiles
from statecore.runtime.shares import TaskShares
from statecore.runtime.task import KeyedOperatorTask, probe_states
from statecore.snapshot import state_table_uri
from statecore.snapshot.changelog import ChangelogConfig
from statecore.ttl.time import TtlTimeProvider
from statecore.types import TypeInfo

MAX_P = 128


def run_checkpoint(
    config: StatecoreConfig,
    function: KeyedProcessFunction,
    records: Sequence[tuple[Any, Any]],
    *,
    job: str,
    checkpoint_id: int,
    parallelism: int = 2,
    key_type: TypeInfo | None = None,
    clock: TtlTimeProvider | None = None,
    watermark: int = MIN_WATERMARK,
    operator: str = "main",
    changelog: ChangelogConfig | None = None,
    backend_class: type[KeyedStateBackend] = HeapKeyedStateBackend,
    latency: LatencyTracking | None = None,
    retain_checkpoints: int | None = None,
    catalog: Catalog | None = None,
    input_identity: str | None = None,
) -> tuple[list[Any], CheckpointRecord]:
    """Process ``(key, record)`` pairs as one checkpoint; the outputs and the checkpoint (with
    each subtask's restore timing and, with ``latency``, the latency percentiles, as the Spark
    runtime records them).

    ``changelog`` makes the tasks write changelog checkpoints; ``backend_class`` is the keyed
    state backend of the tasks. With ``retain_checkpoints``, the run's retention follows, as in
    ``keyed_process``; ``catalog`` is an open catalog to use (default: one connected for this
    checkpoint); ``input_identity`` is what the checkpoint records it processed (a stream's
    micro-batch and offsets); a ``watermark`` other than ``MIN_WATERMARK`` is the one the
    checkpoint completes with, as the Spark runtime records its run's."""
    key_type = key_type or TypeInfo.of(str)
    opened = contextlib.nullcontext(catalog) if catalog else Catalog.connect(config.catalog_url)
    with opened as catalog:
        coordinator = CheckpointCoordinator(config, catalog, job=job, operator=operator)
        planned = coordinator.plan(
            checkpoint_id,
            parallelism=parallelism,
            max_parallelism=MAX_P,
            default_parallelism=parallelism,
            input_identity=input_identity,
        )
        if planned.replayed:
            return [], catalog.get_checkpoint(job, checkpoint_id)
        try:
            planned = coordinator.check_compatible(
                planned,
                probe_states(
                    copy.deepcopy(function),
                    key_type,
                    job=job,
                    operator=operator,
                    parallelism=parallelism,
                    max_parallelism=MAX_P,
                ),
            )
        except Exception as exc:
            catalog.fail_checkpoint(job, checkpoint_id, error=f"{type(exc).__name__}: {exc}")
            raise
        uris = functools.partial(state_table_uri, config.warehouse, job, operator)
        outputs: list[Any] = []
        results = []
        timings: list[dict[str, Any]] = []
        reports = []
        shares = TaskShares.cut(planned.restore, parallelism=parallelism, max_parallelism=MAX_P)
        for index in range(parallelism):
            key_groups = compute_key_group_range_for_operator_index(MAX_P, parallelism, index)
            restore = shares.share(index)  # the task's part of the plan, as a Spark task's
            backend = backend_class(
                key_type=key_type,
                key_group_range=key_groups,
                max_parallelism=MAX_P,
                restore_source=restore.source(key_groups, key_type),
                ttl_time_provider=clock,
            )
            task = KeyedOperatorTask(
                copy.deepcopy(function),
                backend,
                job=job,
                operator=operator,
                subtask_index=index,
                parallelism=parallelism,
                restore=restore,
                changelog=changelog,
                latency=latency,
            )
            started = time.perf_counter()
            task.open()
            timings.append(restore.restore_timing(key_groups, index, time.perf_counter() - started))
            mine = [(k, None, r) for k, r in records if assign_to_key_group(k, MAX_P) in key_groups]
            outputs += task.process(mine)
            outputs += task.advance_watermark(watermark)
            outputs += task.advance_processing_time()
            results += task.snapshot(uris, checkpoint_id=checkpoint_id)
            if task.tracker is not None:
                reports.append(task.tracker.report())
            task.close()
        metrics: dict[str, Any] = {"restore": timings}
        if reports:
            metrics["latency"] = latency_percentiles(reports)
        record = coordinator.commit(
            planned,
            results,
            metrics=metrics,
            watermark=None if watermark == MIN_WATERMARK else watermark,
        )
        if retain_checkpoints is not None:
            retain(catalog, job, retain=retain_checkpoints)
        return outputs, record
