"""A mutable default is copied on every read in a real Spark run, per record and vectorized, on
both backends: each key's list holds its own records only, in the output and in the checkpoint."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.spark import keyed_process, keyed_process_batches
from statecore.vectorized import KeyedBatch, KeyedBatchFunction

from .test_vectorized import state_of

pytestmark = pytest.mark.spark

SEEN = ValueStateDescriptor("seen", pa.list_(pa.int64()), default=[])
OUTPUT = T.StructType(
    [T.StructField("user", T.StringType()), T.StructField("seen", T.ArrayType(T.LongType()))]
)
ROWS = [("a", 1, 0), ("b", 99, 1), ("a", 2, 2), ("c", 5, 3)]
EXPECTED = {"a": [1, 2], "b": [99], "c": [5]}


class Collect(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.seen = ctx.get_state(SEEN)

    def process_element(self, value: Any, ctx: Context) -> Any:
        acc = self.seen.value()
        acc.append(value.x)
        self.seen.update(acc)
        yield ctx.current_key, acc


class CollectBatches(KeyedBatchFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.seen = ctx.get_state(SEEN)

    def process_batch(self, batch: KeyedBatch) -> pa.Table:
        values = batch.values(self.seen)
        xs = batch.rows.column("x").to_pylist()
        index = {key: i for i, key in enumerate(batch.keys)}
        for user, x in zip(batch.rows.column("user").to_pylist(), xs):
            values[index[user]].append(x)
        batch.update(self.seen, values)
        return pa.table({"user": list(batch.keys), "seen": values})


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_default_copy_per_record(
    spark: SparkSession, statecore_home: StatecoreConfig, backend: str
) -> None:
    df = spark.createDataFrame(ROWS, "user string, x bigint, seq bigint")
    run = keyed_process(
        df,
        key="user",
        function=Collect(),
        output_schema=OUTPUT,
        job=f"default_copy_{backend}",
        checkpoint_id=1,
        parallelism=1,
        order_by=["seq"],
        backend=backend,
        config=statecore_home,
    )
    rows = run.output.collect()
    run.unpersist()
    final: dict[str, list[int]] = {}
    for row in rows:  # each output row is the key's list so far: never another key's element
        assert set(row.seen) <= set(EXPECTED[row.user])
        final[row.user] = max(final.get(row.user, []), list(row.seen), key=len)
    assert final == EXPECTED
    assert state_of(statecore_home, f"default_copy_{backend}", "seen") == EXPECTED


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_default_copy_vectorized(
    spark: SparkSession, statecore_home: StatecoreConfig, backend: str
) -> None:
    df = spark.createDataFrame(ROWS, "user string, x bigint, seq bigint")
    run = keyed_process_batches(
        df,
        key="user",
        function=CollectBatches(),
        output_schema=OUTPUT,
        job=f"default_copy_batches_{backend}",
        checkpoint_id=1,
        parallelism=1,
        order_by=["seq"],
        backend=backend,
        config=statecore_home,
    )
    out = {r.user: sorted(r.seen) for r in run.output.collect()}
    run.unpersist()
    assert out == EXPECTED
    assert state_of(statecore_home, f"default_copy_batches_{backend}", "seen") == EXPECTED
