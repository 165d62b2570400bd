"""Variant 5: checkpoint write, restore at parallelism 4, rescale 2 -> 3, TTL cleanup.

- **Checkpoint write**: the workload's final state (one row per key) in a heap backend at p = 1
  is snapshotted (one Parquet file per key group) and committed (Delta transaction + catalog),
  against one ``pyarrow.parquet.write_table`` of the same rows with the same codec (zstd).
- **Restore**: subtask 0 of 4 restores that checkpoint; the bytes it reads (``rchar`` of
  ``/proc/self/io``, so real reads, not a plan) as a share of the snapshot's bytes, beside the
  share the catalog's per-key-group sizes predict.
- **Rescale**: the end-to-end checkpoint taken at p = 2 is run again at p = 3 with no input;
  the keyed-state bytes in files the new version has and the old one did not.
- **TTL cleanup**: the final state as a ValueState with a time to live, every other key written
  one TTL later than the others by a manual clock, checkpointed at p = 1; then
  ``statecore.ops.ttl_cleanup.ttl_cleanup`` (what ``statecore ttl-cleanup`` runs) at a time when
  exactly the earlier half has expired, without the VACUUM; rows scanned per second, and the
  cleaned checkpoint read back (the expired keys gone, the others with their sums).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.functions import EXPIRING_TOTAL, TOTAL, TTL
from benchmarks.measure import Sample, clock
from benchmarks.report import CHECKPOINT, TTL_CLEANUP
from benchmarks.workload import MAX_PARALLELISM, Workload

__all__ = ["checkpoint_and_restore", "rescale", "ttl_cleanup"]

JOB = "bench"
OPERATOR = "main"


def _rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no rchar")


def _filled_backend(workload: Workload) -> Any:
    from statecore.backends import HeapKeyedStateBackend
    from statecore.keygroups import KeyGroupRange, assign_to_key_group
    from statecore.types import TypeInfo

    backend = HeapKeyedStateBackend(
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, MAX_PARALLELISM - 1),
        max_parallelism=MAX_PARALLELISM,
    )
    state: Any = backend.get_partitioned_state(TOTAL)
    for key, total in workload.reference.sums.items():
        backend.set_current_key(key, assign_to_key_group(key, MAX_PARALLELISM))
        state.update(total)
    return backend


def _snapshot_rows(backend: Any) -> pa.Table:
    """The rows the checkpoint holds, with their key group: what the raw write writes."""
    parts = []
    for kg in range(MAX_PARALLELISM):
        rows = backend.snapshot_key_group(TOTAL.name, kg)
        parts.append(rows.append_column("key_group", pa.array([kg] * rows.num_rows, pa.int32())))
    return pa.concat_tables(parts)


def checkpoint_and_restore(workload: Workload) -> Sample:
    """Checkpoint write vs raw Parquet, then restore subtask 0 of 4 (run in a child process)."""
    from benchmarks.functions import RunningSum
    from statecore.catalog import Catalog
    from statecore.checkpoint.coordinator import CheckpointCoordinator
    from statecore.config import StatecoreConfig
    from statecore.keygroups import compute_key_group_range_for_operator_index
    from statecore.runtime.task import KeyedOperatorTask

    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as tmp:
        backend = _filled_backend(workload)
        rows = _snapshot_rows(backend)
        config = StatecoreConfig.resolve(home=f"{tmp}/home", env={})
        catalog = Catalog.connect(config.catalog_url)
        try:
            coordinator = CheckpointCoordinator(config, catalog, job=JOB, operator=OPERATOR)
            planned = coordinator.plan(
                1, parallelism=1, max_parallelism=MAX_PARALLELISM, default_parallelism=1
            )
            task = KeyedOperatorTask(
                RunningSum(), backend, job=JOB, operator=OPERATOR, subtask_index=0, parallelism=1
            )
            task.open()
            start = clock()
            snapshots = task.snapshot(
                {TOTAL.name: coordinator.table_uri(TOTAL.name)}, checkpoint_id=1
            )
            written = clock()
            record = coordinator.commit(planned, snapshots)
            checkpoint_seconds = clock() - start
            snapshot_seconds = written - start

            start = clock()
            pq.write_table(rows, f"{tmp}/raw.parquet", compression="zstd")
            raw_seconds = clock() - start
            raw_bytes = Path(tmp, "raw.parquet").stat().st_size

            table = record.tables[0]
            snapshot_bytes = table.bytes
            key_groups = compute_key_group_range_for_operator_index(MAX_PARALLELISM, 4, 0)
            planned_bytes = sum(b for kg, (_, b) in table.key_groups.items() if kg in key_groups)

            restore_plan = coordinator.plan(
                2, parallelism=4, max_parallelism=MAX_PARALLELISM, default_parallelism=1
            ).restore
            restore = _restore(restore_plan, key_groups)
            full = _restore(
                restore_plan, compute_key_group_range_for_operator_index(MAX_PARALLELISM, 1, 0)
            )
        finally:
            catalog.close()
    if full["keys"] != len(workload.reference.sums):
        raise AssertionError(f"full restore found {full['keys']} keys")
    state_rows = rows.num_rows
    return Sample(
        CHECKPOINT,
        checkpoint_seconds,
        state_rows,
        extra={
            "state_rows": state_rows,
            "files": sum(len(s.files) for s in snapshots),
            "snapshot_seconds": snapshot_seconds,
            "commit_seconds": checkpoint_seconds - snapshot_seconds,
            "raw_seconds": raw_seconds,
            "raw_bytes": raw_bytes,
            "snapshot_bytes": snapshot_bytes,
            "restore_key_groups": f"{key_groups.start}..{key_groups.end}",
            "restore_planned_bytes": planned_bytes,
            "restore_read_bytes": restore["read_bytes"],
            "restore_seconds": restore["seconds"],
            "restore_keys": restore["keys"],
            "full_restore_read_bytes": full["read_bytes"],
            "full_restore_seconds": full["seconds"],
        },
    )


def _restore(plan: Any, key_groups: Any) -> dict[str, Any]:
    from statecore.backends import HeapKeyedStateBackend
    from statecore.types import TypeInfo

    key_type = TypeInfo.of(str)
    before = _rchar()
    start = clock()
    backend = HeapKeyedStateBackend(
        key_type=key_type,
        key_group_range=key_groups,
        max_parallelism=MAX_PARALLELISM,
        restore_source=plan.source(key_groups, key_type),
    )
    backend.get_partitioned_state(TOTAL)
    seconds = clock() - start
    read = _rchar() - before
    return {
        "read_bytes": read,
        "seconds": seconds,
        "keys": sum(1 for _ in backend.keys(TOTAL.name)),
    }


def rescale(spark: Any, workload: Workload, home: str) -> Sample:
    """Run checkpoint 2 of the end-to-end job in ``home`` (taken at p = 2) at p = 3, no input."""
    from benchmarks.functions import RunningSum
    from benchmarks.on_spark import INPUT_SCHEMA, OUTPUT_SCHEMA
    from statecore.catalog import Catalog
    from statecore.config import StatecoreConfig
    from statecore.snapshot import SnapshotTable
    from statecore.spark.keyed import keyed_process

    config = StatecoreConfig.resolve(home=home, env={})
    with Catalog.connect(config.catalog_url) as catalog:
        before = catalog.latest_checkpoint(JOB)
    assert before is not None and before.parallelism == 2, before
    empty = spark.createDataFrame([], INPUT_SCHEMA)
    start = clock()
    run = keyed_process(
        empty,
        key="key",
        function=RunningSum(),
        output_schema=OUTPUT_SCHEMA,
        job=JOB,
        checkpoint_id=before.checkpoint_id + 1,
        parallelism=3,
        order_by=["seq"],
        config=config,
    )
    run.output.count()
    seconds = clock() - start
    spark.catalog.clearCache()
    after = run.checkpoint
    old = {t.state: t for t in before.tables}
    rewritten = 0
    files_after = 0
    sums: dict[str, int] = {}
    for t in after.tables:
        schema = pa.schema(
            [
                pa.field("key", pa.string(), nullable=False),
                pa.field("namespace", pa.string(), nullable=False),
                pa.field("value", pa.int64()),
            ]
        )
        table = SnapshotTable(t.path, schema, label=f"{JOB}/{OPERATOR}/{t.state}")
        new_files = table.files(t.version)
        old_paths = {f.path for f in table.files(old[t.state].version)}
        files_after += len(new_files)
        rewritten += sum(f.size for f in new_files if f.path not in old_paths)
        for _, rows in table.read_files(new_files):
            sums.update(zip(rows.column("key").to_pylist(), rows.column("value").to_pylist()))
    workload.reference.check_sums("rescaled checkpoint", sums)
    return Sample(
        "rescale 2 -> 3 (statecore, Spark, no input)",
        seconds,
        0,
        extra={
            "rewritten_bytes": rewritten,
            "snapshot_bytes": after.total_bytes,
            "files": files_after,
            "parallelism": after.parallelism,
        },
    )


WRITTEN_MS = 1_700_000_000_000  # when the earlier half of the keys was last written
TTL_MS = int(TTL.total_seconds() * 1000)
CLEANUP_AT_MS = WRITTEN_MS + TTL_MS + TTL_MS // 2  # the earlier half expired, the later not


def ttl_cleanup(workload: Workload) -> Sample:
    """TTL cleanup of a checkpoint whose TTL'd total expired for every other key."""
    from benchmarks.functions import ExpiringSum
    from statecore.backends import HeapKeyedStateBackend
    from statecore.backends.base import snapshot_schema
    from statecore.catalog import Catalog
    from statecore.checkpoint.coordinator import CheckpointCoordinator
    from statecore.config import StatecoreConfig
    from statecore.keygroups import KeyGroupRange, assign_to_key_group
    from statecore.ops.ttl_cleanup import ttl_cleanup as cleanup
    from statecore.runtime.task import KeyedOperatorTask
    from statecore.snapshot import SnapshotTable
    from statecore.ttl import ManualTimeProvider
    from statecore.types import TypeInfo

    sums = workload.reference.sums
    key_type = TypeInfo.of(str)
    written = ManualTimeProvider(WRITTEN_MS)
    backend = HeapKeyedStateBackend(
        key_type=key_type,
        key_group_range=KeyGroupRange(0, MAX_PARALLELISM - 1),
        max_parallelism=MAX_PARALLELISM,
        ttl_time_provider=written,
    )
    state: Any = backend.get_partitioned_state(EXPIRING_TOTAL)
    for i, (key, total) in enumerate(sums.items()):
        written.now_ms = WRITTEN_MS + (i % 2) * TTL_MS  # every other key one TTL later
        backend.set_current_key(key, assign_to_key_group(key, MAX_PARALLELISM))
        state.update(total)
    kept = {key: total for i, (key, total) in enumerate(sums.items()) if i % 2}

    with tempfile.TemporaryDirectory(prefix="bench-ttl-cleanup-") as tmp:
        config = StatecoreConfig.resolve(home=f"{tmp}/home", env={})
        with Catalog.connect(config.catalog_url) as catalog:
            coordinator = CheckpointCoordinator(config, catalog, job=JOB, operator=OPERATOR)
            planned = coordinator.plan(
                1, parallelism=1, max_parallelism=MAX_PARALLELISM, default_parallelism=1
            )
            task = KeyedOperatorTask(
                ExpiringSum(), backend, job=JOB, operator=OPERATOR, subtask_index=0, parallelism=1
            )
            task.open()
            uri = coordinator.table_uri(EXPIRING_TOTAL.name)
            before = coordinator.commit(
                planned, task.snapshot({EXPIRING_TOTAL.name: uri}, checkpoint_id=1)
            ).tables[0]

            start = clock()
            report = cleanup(
                config,
                catalog,
                JOB,
                time_provider=ManualTimeProvider(CLEANUP_AT_MS),
                vacuum_after=None,
            )
            seconds = clock() - start

            after = catalog.latest_checkpoint(JOB)
            assert after is not None and after.checkpoint_id == report.checkpoint_id, after
            [table] = after.tables
            snapshot = SnapshotTable(
                table.path,
                snapshot_schema(key_type, EXPIRING_TOTAL),
                label=f"{JOB}/{OPERATOR}/{EXPIRING_TOTAL.name}",
            )
            found: dict[str, int] = {}
            for _, rows in snapshot.read_files(snapshot.files(table.version)):
                found.update(zip(rows.column("key").to_pylist(), rows.column("value").to_pylist()))
    if found != kept:
        raise AssertionError(
            f"after TTL cleanup {len(found)} keys remain, {len(kept)} expected "
            f"({len(found.keys() - kept.keys())} not expired, "
            f"{len(kept.keys() - found.keys())} lost or changed)"
        )
    if report.expired != len(sums) - len(kept):
        raise AssertionError(f"TTL cleanup expired {report.expired} of {len(sums)} rows")
    return Sample(
        TTL_CLEANUP,
        seconds,
        before.rows,
        extra={
            "rows_scanned": before.rows,
            "rows_removed": report.rows_reclaimed,
            "rows_kept": table.rows,
            "key_groups": len(report.key_groups),
            "bytes_before": before.bytes,
            "bytes_after": table.bytes,
        },
    )
