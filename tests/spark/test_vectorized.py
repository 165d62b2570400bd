"""The vectorized keyed path on a real local Spark: same state, same checkpoints as per record.

Each test checks the outputs and the committed state against a pandas computation over all the
events so far, and hands the job between the two APIs to show they share state.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import types as T

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import ConfigError
from statecore.query import open_views
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.spark import keyed_process, keyed_process_batches
from statecore.vectorized import Aggregate, KeyedBatch, KeyedBatchFunction, RunningAggregate

pytestmark = pytest.mark.spark

TOTAL = ValueStateDescriptor("total", int, default=0)
INPUT = "user string, amount bigint, seq bigint"
OUTPUT = T.StructType(
    [
        T.StructField("user", T.StringType()),
        T.StructField("amount", T.LongType()),
        T.StructField("running", T.LongType()),
    ]
)


class PerRecordSum(KeyedProcessFunction):
    """The per-record equivalent of ``RunningAggregate("amount", TOTAL, output="running")``."""

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(TOTAL)

    def process_element(self, value: Any, ctx: Context) -> Any:
        total = self.total.value() + value.amount
        self.total.update(total)
        yield ctx.current_key, value.amount, total


def events(start: int, n: int, users: int = 37) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "user": [f"u{(i * 7) % users}" for i in range(start, start + n)],
            "amount": [(i * 13) % 50 for i in range(start, start + n)],
            "seq": list(range(start, start + n)),
        }
    )


def expected_running(history: pd.DataFrame, frame: pd.DataFrame) -> list[tuple[str, int, int]]:
    """The rows ``frame`` must produce after ``history``: each key's running sum in seq order."""
    both = pd.concat([history, frame], ignore_index=True).sort_values("seq")
    both["running"] = both.groupby("user")["amount"].cumsum()
    mine = both[both["seq"].isin(frame["seq"])]
    return sorted(zip(mine["user"], mine["amount"].astype(int), mine["running"].astype(int)))


def state_of(config: StatecoreConfig, job: str, state: str = "total") -> dict[str, Any]:
    with Catalog.connect(config.catalog_url) as catalog:
        views = open_views(catalog, jobs=[job])
        rows = views.sql(f"SELECT key, value FROM {job}.{state}").to_pylist()
        views.connection.close()
    return {r["key"]: r["value"] for r in rows}


def collect(run: Any) -> list[tuple[Any, ...]]:
    rows = sorted(tuple(r) for r in run.output.collect())
    run.unpersist()
    return rows


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_running_sum_hands_state_to_and_from_the_per_record_api(
    spark, statecore_home, backend
) -> None:  # type: ignore[no-untyped-def]
    frames = [events(0, 400), events(400, 300), events(700, 300)]
    so_far = frames[0].iloc[:0]
    runs = [("vectorized", 1), ("per-record", 2), ("vectorized", 3)]
    for (api, checkpoint_id), frame in zip(runs, frames):
        df = spark.createDataFrame(frame, INPUT)
        if api == "vectorized":
            run = keyed_process_batches(
                df,
                key="user",
                function=RunningAggregate("amount", TOTAL, output="running"),
                output_schema=OUTPUT,
                job="mixed",
                checkpoint_id=checkpoint_id,
                parallelism=2,
                order_by=["seq"],
                backend=backend,
                batch_rows=128,
            )
        else:
            run = keyed_process(
                df,
                key="user",
                function=PerRecordSum(),
                output_schema=OUTPUT,
                job="mixed",
                checkpoint_id=checkpoint_id,
                parallelism=2,
                order_by=["seq"],
                backend=backend,
            )
        assert run.checkpoint.status is CheckpointStatus.COMPLETED
        assert run.records == len(frame)
        assert collect(run) == expected_running(so_far, frame), api
        so_far = pd.concat([so_far, frame], ignore_index=True)
    totals = so_far.groupby("user")["amount"].sum().astype(int).to_dict()
    assert state_of(statecore_home, "mixed") == totals


def test_aggregate_max_per_key_and_batch(spark, statecore_home) -> None:  # type: ignore[no-untyped-def]
    best = ValueStateDescriptor("best", int)
    schema = T.StructType(
        [T.StructField("user", T.StringType()), T.StructField("best", T.LongType())]
    )
    first, second = events(0, 200), events(200, 200)
    for checkpoint_id, frame in enumerate([first, second], start=1):
        run = keyed_process_batches(
            spark.createDataFrame(frame, INPUT),
            key="user",
            function=Aggregate("amount", best, "max", output="best", key="user"),
            output_schema=schema,
            job="best",
            checkpoint_id=checkpoint_id,
            parallelism=2,
        )
        seen = pd.concat([first, second][:checkpoint_id])
        expected = seen.groupby("user")["amount"].max().astype(int)
        assert collect(run) == sorted(expected[frame["user"].unique()].items())
    assert state_of(statecore_home, "best", "best") == expected.to_dict()


class Mean(KeyedBatchFunction):
    """A custom vectorized function: the mean amount per key, from a float sum and a count."""

    def open(self, ctx: RuntimeContext) -> None:
        self.sum = ctx.get_state(ValueStateDescriptor("sum", float, default=0.0))
        self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))

    def process_batch(self, batch: KeyedBatch) -> pa.Table:
        frame = batch.rows.to_pandas().assign(code=batch.codes)
        per_key = frame.groupby("code")["amount"].agg(["sum", "count"])
        sums = [s + float(per_key["sum"].get(i, 0)) for i, s in enumerate(batch.values(self.sum))]
        counts = [
            c + int(per_key["count"].get(i, 0)) for i, c in enumerate(batch.values(self.count))
        ]
        batch.update(self.sum, sums)
        batch.update(self.count, counts)
        return pa.table({"user": batch.keys, "mean": [s / c for s, c in zip(sums, counts)]})


def test_custom_batch_function(spark, statecore_home) -> None:  # type: ignore[no-untyped-def]
    schema = T.StructType(
        [T.StructField("user", T.StringType()), T.StructField("mean", T.DoubleType())]
    )
    frame = events(0, 500)
    run = keyed_process_batches(
        spark.createDataFrame(frame, INPUT),
        key="user",
        function=Mean(),
        output_schema=schema,
        job="mean",
        checkpoint_id=1,
        parallelism=2,
    )
    expected = frame.groupby("user")["amount"].mean()
    got = dict(collect(run))
    assert got.keys() == set(expected.index)
    assert all(abs(got[u] - expected[u]) < 1e-9 for u in got)
    assert state_of(statecore_home, "mean", "count") == frame.groupby("user").size().to_dict()


def test_bad_input_fails_the_checkpoint_and_commits_nothing(spark, statecore_home) -> None:  # type: ignore[no-untyped-def]
    good = spark.createDataFrame(events(0, 100), INPUT)
    keyed_process_batches(
        good,
        key="user",
        function=RunningAggregate("amount", TOTAL),
        output_schema=OUTPUT,
        job="bad",
        checkpoint_id=1,
        parallelism=2,
    ).unpersist()
    before = state_of(statecore_home, "bad")

    with pytest.raises(ConfigError, match="not a KeyedBatchFunction"):
        keyed_process_batches(
            good,
            key="user",
            function=PerRecordSum(),  # type: ignore[arg-type]
            output_schema=OUTPUT,
            job="bad",
            checkpoint_id=2,
        )
    nulls = spark.createDataFrame([("u1", None, 1)], INPUT)
    with pytest.raises(ConfigError, match="'amount' has 1 null values"):
        keyed_process_batches(
            nulls,
            key="user",
            function=RunningAggregate("amount", TOTAL),
            output_schema=OUTPUT,
            job="bad",
            checkpoint_id=2,
            parallelism=2,
        )
    wrong = T.StructType([*OUTPUT.fields[:2], T.StructField("total", T.LongType())])
    with pytest.raises(ConfigError, match=r"no column\(s\) \['total'\]"):
        keyed_process_batches(
            good,
            key="user",
            function=RunningAggregate("amount", TOTAL),
            output_schema=wrong,
            job="bad",
            checkpoint_id=3,
            parallelism=2,
        )
    with pytest.raises(ConfigError, match="needs an int or float ValueState"):
        RunningAggregate("amount", ValueStateDescriptor("names", str))

    assert state_of(statecore_home, "bad") == before
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        statuses = {c.checkpoint_id: c.status for c in catalog.list_checkpoints("bad")}
    assert statuses[1] is CheckpointStatus.COMPLETED
    assert statuses[2] is CheckpointStatus.FAILED and statuses[3] is CheckpointStatus.FAILED
