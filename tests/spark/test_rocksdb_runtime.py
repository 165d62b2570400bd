"""The RocksDB backend in the real Spark runtime, with the clickstream job.

One job per backend over the same three days: the outputs agree; RocksDB tasks reopen their
local instances instead of ingesting; checkpoints move between backends in both directions; and
a rescale reuses what overlaps, clips the rest and ingests what is missing. The backend is
named (``backend="rocksdb"``) or given as ``BackendParameters`` with its options.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from jobs import clickstream
from statecore.backends import BackendParameters
from statecore.backends.rocksdb import RocksDBOptions
from statecore.cli.demo import generate_clickstream
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.spark import KeyedRun

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def run(
    spark: Any,
    folder: Path,
    checkpoint_id: int,
    job: str,
    backend: str | BackendParameters,
    parallelism: int | None = None,
) -> tuple[list[tuple[Any, ...]], KeyedRun]:
    result = clickstream.run(
        spark,
        spark.read.parquet(str(folder)),
        checkpoint_id=checkpoint_id,
        job=job,
        backend=backend,
        parallelism=parallelism,
    )
    rows = sorted(tuple(r) for r in result.output.collect())
    result.unpersist()
    return rows, result


def test_rocksdb_agrees_with_heap_reuses_local_state_and_restores_across_backends(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    days = generate_clickstream(tmp_path / "input", days=3, users=120, events_per_day=600)
    heap = [run(spark, day, i + 1, "cs_heap", "heap") for i, day in enumerate(days)]

    with caplog.at_level(logging.INFO, logger="statecore.spark.keyed"):
        rocks = [run(spark, day, i + 1, "cs_rocks", "rocksdb") for i, day in enumerate(days)]
    for (heap_rows, heap_run), (rocks_rows, rocks_run) in zip(heap, rocks):
        assert rocks_rows == heap_rows
        assert rocks_run.checkpoint.total_rows == heap_run.checkpoint.total_rows
    for _, later in rocks[1:]:  # the second and third runs skip the ingest: each task kept
        # its instance open in its Python worker, or reopened the one another worker released
        assert later.restore["warm_key_groups"] + later.restore["reused_key_groups"] == 128
        assert later.restore["ingested_rows"] == 0
    assert "reused local state, 0 rows ingested" in caplog.text
    local = Path(statecore_home.home) / "rocksdb" / "cs_rocks" / "main"
    assert sorted(p.name for p in local.iterdir() if p.is_dir()) == ["kg-0-63", "kg-64-127"]

    # heap -> rocksdb (a cold restore, by bulk load) -> heap
    first = run(spark, days[0], 1, "cs_mixed", "heap")
    second = run(spark, days[1], 2, "cs_mixed", "rocksdb")
    third = run(spark, days[2], 3, "cs_mixed", "heap")
    assert second[1].restore["reused_key_groups"] == 0
    keyed_rows = sum(t.rows for t in first[1].checkpoint.tables if t.table_kind == "keyed")
    assert second[1].restore["ingested_rows"] == keyed_rows
    assert [first[0], second[0], third[0]] == [rows for rows, _ in heap]  # cold == warm == heap


def test_rescale_reuses_overlapping_local_state(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    days = generate_clickstream(tmp_path / "input", days=3, users=120, events_per_day=600)
    heap = [run(spark, day, i + 1, "rs_heap", "heap")[0] for i, day in enumerate(days)]

    rocksdb = BackendParameters(name="rocksdb", options=RocksDBOptions(value_cache_entries=64))
    rows1, _ = run(spark, days[0], 1, "rs_rocks", rocksdb, parallelism=2)
    rows2, scaled_in = run(spark, days[1], 2, "rs_rocks", rocksdb, parallelism=1)
    assert scaled_in.restore["warm_tasks"] == 0  # another range: nothing kept warm fits
    assert scaled_in.restore["reused_key_groups"] == 64  # one instance reopened ...
    assert scaled_in.restore["ingested_rows"] > 0  # ... the other half bulk-loaded
    rows3, scaled_out = run(spark, days[2], 3, "rs_rocks", rocksdb, parallelism=2)
    assert scaled_out.restore["reused_key_groups"] == 64  # one task takes the instance over
    assert scaled_out.restore["clipped_key_groups"] == 64  # and deletes the other half
    assert [rows1, rows2, rows3] == heap


def test_an_unknown_backend_or_misfit_options_fail_before_anything_runs(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    (day,) = generate_clickstream(tmp_path / "input", days=1, users=5, events_per_day=20)
    events = spark.read.parquet(str(day))
    with pytest.raises(ConfigError, match="unknown state backend 'memory'; known: heap, rocksdb"):
        clickstream.run(spark, events, checkpoint_id=1, job="bad_backend", backend="memory")
    with pytest.raises(ConfigError, match="'heap' takes no options, got RocksDBOptions"):
        clickstream.run(
            spark,
            events,
            checkpoint_id=1,
            job="bad_backend",
            backend="heap",
            backend_options=RocksDBOptions(),
        )
    assert not (Path(statecore_home.warehouse) / "bad_backend").exists()
