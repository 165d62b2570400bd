"""Bad input to a run is refused with a clear error and writes nothing: null keys, an
``order_by`` column that does not exist, a checkpoint id replayed with other input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError, KeyTypeError, ReplayMismatchError
from statecore.spark import keyed_process
from tests.spark.concurrent_run import OUTPUT, GatedSum

pytestmark = pytest.mark.spark

JOB = "sums"


def _run(df: Any, checkpoint_id: int, **options: Any) -> Any:
    return keyed_process(
        df, key="key", function=GatedSum(None), output_schema=OUTPUT, job=JOB,
        checkpoint_id=checkpoint_id, parallelism=2, **options,
    )  # fmt: skip


def _checkpoints(config: StatecoreConfig) -> list[tuple[int, CheckpointStatus]]:
    with Catalog.connect(config.catalog_url) as catalog:
        if JOB not in {j.name for j in catalog.list_jobs()}:
            return []
        assert catalog.maintenance_lock(JOB) is None  # the run let go of the job
        return [(c.checkpoint_id, c.status) for c in catalog.list_checkpoints(JOB)]


def test_bad_input_null_keys_fail_before_anything_commits(
    spark: Any, statecore_home: StatecoreConfig
) -> None:
    df = spark.createDataFrame([("a", 1), (None, 2), ("b", 3)], "key string, n long")
    output = Path(statecore_home.warehouse) / "_output"
    with pytest.raises(KeyTypeError, match="job 'sums'.*key column 'key' holds 1 null key"):
        _run(df, 1, output_table=str(output))
    assert _checkpoints(statecore_home) == [(1, CheckpointStatus.FAILED)]
    state = Path(statecore_home.warehouse) / JOB / "main" / "keyed" / "total"
    assert not (state / "_delta_log").exists()  # no state table committed
    assert not (output / "_delta_log").exists()


def test_bad_input_order_by_a_missing_column_begins_no_checkpoint(
    spark: Any, statecore_home: StatecoreConfig
) -> None:
    df = spark.createDataFrame([("a", 1)], "key string, n long")
    with pytest.raises(ConfigError, match=r"checkpoint 1: order_by names \['ts'\]"):
        _run(df, 1, order_by=["n", "ts"])
    assert _checkpoints(statecore_home) == []
    run = _run(df, 1, order_by=["n"])
    run.unpersist()
    assert _checkpoints(statecore_home) == [(1, CheckpointStatus.COMPLETED)]


def test_bad_input_replay_with_other_input_is_refused(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    first, other = tmp_path / "first", tmp_path / "other"
    spark.createDataFrame([("a", 1), ("b", 2)], "key string, n long").write.parquet(str(first))
    spark.createDataFrame([("a", 5)], "key string, n long").write.parquet(str(other))
    done = _run(spark.read.parquet(str(first)), 1)
    done.unpersist()
    assert done.checkpoint.input_identity.startswith("files:")
    assert _run(spark.read.parquet(str(first)), 1).replayed  # the same files: a no-op
    with pytest.raises(ReplayMismatchError, match="checkpoint 1 of job 'sums' is COMPLETED"):
        _run(spark.read.parquet(str(other)), 1)
    streamed = spark.createDataFrame([("a", 5)], "key string, n long")
    batch = {"batch_id": 2, "offsets": {"topic": {"0": 41}}}
    _run(streamed, 2, input_fingerprint=batch).unpersist()
    assert _run(streamed, 2, input_fingerprint=dict(batch)).replayed
    with pytest.raises(ReplayMismatchError, match='"0":41'):
        _run(streamed, 2, input_fingerprint={"batch_id": 2, "offsets": {"topic": {"0": 57}}})
    assert _checkpoints(statecore_home) == [
        (1, CheckpointStatus.COMPLETED),
        (2, CheckpointStatus.COMPLETED),
    ]


def test_bad_input_replay_of_an_in_memory_dataframe_with_other_rows_is_refused(
    spark: Any, statecore_home: StatecoreConfig
) -> None:
    rows = [("a", 1), ("b", 2), ("a", 3)]
    done = _run(spark.createDataFrame(rows, "key string, n long"), 1)
    done.unpersist()
    assert done.checkpoint.input_identity.startswith("rows:3:")
    # The same rows in another order and partitioning: the same input, a no-op.
    again = spark.createDataFrame(rows[::-1], "key string, n long").repartition(3)
    assert _run(again, 1).replayed
    for other in ([("a", 1), ("b", 2), ("a", 4)], rows[:2]):  # a changed row, a missing row
        with pytest.raises(ReplayMismatchError, match=r"is COMPLETED with input rows:3:"):
            _run(spark.createDataFrame(other, "key string, n long"), 1)
    # A column of maps (which Spark does not hash) is hashed as JSON.
    maps = spark.createDataFrame([("a", {"x": 1})], "key string, m map<string, long>")
    _run(maps.selectExpr("key", "m['x'] AS n", "m"), 2).unpersist()
    changed = spark.createDataFrame([("a", {"x": 1, "y": 2})], "key string, m map<string, long>")
    with pytest.raises(ReplayMismatchError, match="checkpoint 2"):
        _run(changed.selectExpr("key", "m['x'] AS n", "m"), 2)
    assert _checkpoints(statecore_home) == [
        (1, CheckpointStatus.COMPLETED),
        (2, CheckpointStatus.COMPLETED),
    ]
