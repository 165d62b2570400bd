"""The keyed runtime on a real local Spark: restore, process, snapshot, commit, complete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobs import clickstream
from statecore.catalog import Catalog, CheckpointStatus
from statecore.cli.demo import generate_clickstream
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import (
    CheckpointCommitError,
    ConfigError,
    KeyTypeError,
    MaxParallelismMismatchError,
    StateAccessError,
)
from statecore.keygroups import compute_key_group_range_for_operator_index
from statecore.query import open_views
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext

pytestmark = pytest.mark.spark

STATES = ("total_amount", "last_events", "event_counts", "max_amount", "avg_amount")


@pytest.fixture(scope="module")
def days(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return generate_clickstream(
        tmp_path_factory.mktemp("clicks"), days=3, users=60, events_per_day=300
    )


def final_state(config: StatecoreConfig, job: str) -> dict[str, list[tuple[Any, ...]]]:
    with Catalog.connect(config.catalog_url) as catalog:
        views = open_views(catalog, jobs=[job])
        out = {}
        for state in STATES:
            t = views.sql(f"SELECT * EXCLUDE (key_group) FROM {job}.{state}")
            out[state] = sorted(tuple(str(v) for v in r.values()) for r in t.to_pylist())
        views.connection.close()
        return out


def outputs(run: Any) -> list[tuple[Any, ...]]:
    rows = sorted(tuple(r) for r in run.output.collect())
    assert run.persisted is not None and run.persisted.storageLevel.useMemory
    run.unpersist()  # releases the persisted result (output.unpersist() did not)
    assert not run.persisted.storageLevel.useMemory
    return rows


@pytest.mark.parametrize("parallelisms", [(2, 2, 2), (2, 2, 3)], ids=["p2", "rescale-2-to-3"])
def test_day_by_day_equals_one_run(spark, days, statecore_home, parallelisms) -> None:  # type: ignore[no-untyped-def]
    all_days = spark.read.parquet(*[str(d) for d in days])
    reference = clickstream.run(spark, all_days, checkpoint_id=1, job="all_at_once", parallelism=2)
    expected_out = outputs(reference)
    daily_out: list[tuple[Any, ...]] = []
    for i, (day, p) in enumerate(zip(days, parallelisms)):
        run = clickstream.run(
            spark, spark.read.parquet(str(day)), checkpoint_id=i + 1, job="daily", parallelism=p
        )
        assert run.checkpoint.status is CheckpointStatus.COMPLETED
        assert run.checkpoint.parallelism == p and run.records == 300
        daily_out += outputs(run)
    assert sorted(daily_out) == expected_out and len(expected_out) == 900
    assert final_state(statecore_home, "daily") == final_state(statecore_home, "all_at_once")


@pytest.mark.parametrize("p,max_p", [(1, 128), (2, 128), (3, 128), (5, 7)])
def test_partition_i_holds_exactly_key_group_range_i(spark, p, max_p) -> None:  # type: ignore[no-untyped-def]
    from statecore.spark.partitioning import KEY_GROUP_COLUMN, align_to_key_groups

    df = spark.createDataFrame([(f"user-{i}",) for i in range(2000)], "user_id string")
    aligned = align_to_key_groups(df, "user_id", parallelism=p, max_parallelism=max_p)
    assert aligned.rdd.getNumPartitions() == p
    seen = aligned.rdd.mapPartitionsWithIndex(
        lambda i, rows: [(i, r[KEY_GROUP_COLUMN]) for r in rows]
    ).collect()
    assert len(seen) == 2000
    for index, kg in seen:
        assert kg in compute_key_group_range_for_operator_index(max_p, p, index)


def test_replayed_checkpoint_is_a_no_op(spark, days, statecore_home) -> None:  # type: ignore[no-untyped-def]
    first = clickstream.run(
        spark, spark.read.parquet(str(days[0])), checkpoint_id=7, job="replay", parallelism=2
    )
    before = final_state(statecore_home, "replay")
    outputs(first)
    again = clickstream.run(
        spark, spark.read.parquet(str(days[0])), checkpoint_id=7, job="replay", parallelism=2
    )
    assert again.replayed and again.output.count() == 0
    assert final_state(statecore_home, "replay") == before


def test_failed_checkpoint_leaves_nothing_behind(spark, days, statecore_home, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from statecore.snapshot import SnapshotTable

    def run(job: str, day: int, cp: int) -> None:
        outputs(
            clickstream.run(
                spark, spark.read.parquet(str(days[day])), checkpoint_id=cp, job=job, parallelism=2
            )
        )

    run("clean", 0, 1)
    run("clean", 1, 2)
    run("flaky", 0, 1)
    real_commit = SnapshotTable.commit

    def commit_then_fail(self: SnapshotTable, *args: Any, **kwargs: Any) -> int:
        version = real_commit(self, *args, **kwargs)  # this table is committed ...
        if self.label.endswith("max_amount"):
            raise OSError("object store went away")  # ... and the checkpoint fails later
        return version

    monkeypatch.setattr(SnapshotTable, "commit", commit_then_fail)
    with pytest.raises(OSError):
        run("flaky", 1, 2)
    monkeypatch.setattr(SnapshotTable, "commit", real_commit)
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert catalog.get_checkpoint("flaky", 2).status is CheckpointStatus.FAILED
        assert catalog.latest_checkpoint("flaky").checkpoint_id == 1  # type: ignore[union-attr]
    run("flaky", 1, 2)  # the retry restores checkpoint 1, not the partial commit
    assert final_state(statecore_home, "flaky") == final_state(statecore_home, "clean")


class WritesText(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int))

    def process_element(self, value: Any, ctx: Context) -> None:
        self.total.update("not an int")


def test_bad_input_is_a_clear_error_and_writes_nothing(spark, statecore_home) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import types as T

    from statecore.spark import keyed_process

    out = T.StructType([T.StructField("k", T.StringType())])
    doubles = spark.createDataFrame([(1.5,)], "k double")
    with pytest.raises(KeyTypeError, match="key column 'k' has type double"):
        keyed_process(
            doubles, key="k", function=WritesText(), output_schema=out, job="bad", checkpoint_id=1
        )
    assert not Path(statecore_home.warehouse).exists()
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert catalog.list_jobs() == []

    strings = spark.createDataFrame([("a",), ("b",)], "k string")
    with pytest.raises(StateAccessError, match="does not match the declared type int64"):
        keyed_process(
            strings,
            key="k",
            function=WritesText(),
            output_schema=out,
            job="bad",
            checkpoint_id=1,
            parallelism=2,
        )
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert catalog.get_checkpoint("bad", 1).status is CheckpointStatus.FAILED
        assert catalog.latest_checkpoint("bad") is None
    with pytest.raises(MaxParallelismMismatchError, match="max parallelism"):
        keyed_process(
            strings,
            key="k",
            function=WritesText(),
            output_schema=out,
            job="bad",
            checkpoint_id=2,
            parallelism=2,
            max_parallelism=256,
        )
    assert isinstance(CheckpointCommitError("x"), Exception)


@pytest.mark.parametrize("names", [{"job": "../../escaped"}, {"job": "ok", "operator": "a/b"}])
def test_traversal_names_are_refused_before_anything_runs(
    spark: Any, days: list[Path], statecore_home: StatecoreConfig, names: dict[str, str]
) -> None:
    bad = names.get("operator", names["job"])
    with pytest.raises(ConfigError, match=f"name '{bad}'"):
        clickstream.keyed_process(
            spark.read.parquet(str(days[0])),
            key="user_id",
            function=clickstream.UserActivity(),
            output_schema=clickstream.OUTPUT_SCHEMA,
            checkpoint_id=1,
            config=statecore_home,
            **names,
        )
    assert not Path(statecore_home.home).exists() or not any(Path(statecore_home.home).rglob("*"))


def test_latency_and_restore_estimate_recorded_by_spark_runs(  # type: ignore[no-untyped-def]
    spark, days, statecore_home, monkeypatch
) -> None:
    from statecore.checkpoint.points import checkpoint_point
    from statecore.ops.estimate import estimate_restore

    monkeypatch.setenv("STATECORE_LATENCY_SAMPLE_INTERVAL", "10")
    for i, (day, p) in enumerate(zip(days[:2], (2, 3))):  # a rescale: no task stays warm
        outputs(
            clickstream.run(
                spark, spark.read.parquet(str(day)), checkpoint_id=i + 1, job="timed", parallelism=p
            )
        )
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        second = catalog.get_checkpoint("timed", 2)
        restores = second.metrics["restore"]
        assert [r["subtask"] for r in restores] == [0, 1, 2]
        assert all(r["bytes"] > 0 and r["seconds"] > 0 for r in restores)
        first = catalog.get_checkpoint("timed", 1).tables
        keyed = sum(t.bytes for t in first if t.table_kind != "operator")
        shared = sum(t.bytes for t in first if t.table_kind == "operator")  # read by each
        assert sum(r["bytes"] for r in restores) == keyed + 3 * shared
        latency = second.metrics["latency"]
        assert set(latency) == set(STATES)
        assert latency["total_amount"]["value"]["samples"] >= 30  # every 10th of 300 records
        estimate = estimate_restore(catalog, checkpoint_point(catalog, "timed"), 3)
        assert estimate.model.samples == 3 and len(estimate.subtasks) == 3
