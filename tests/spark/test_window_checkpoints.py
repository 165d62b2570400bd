"""A window operator run by ``keyed_process`` on Spark: its open windows are in the
checkpoint's tables (SQL shows each key's windows, with their key group and namespace, and
their timers), and a restore at another parallelism fires them as a run that never stopped."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pyspark.sql import types as T

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.descriptors import AggregateFunction
from statecore.keygroups import assign_to_key_group
from statecore.query import open_views
from statecore.spark import keyed_process
from statecore.types import PICKLED
from statecore.windows import ProcessWindowFunction, TumblingWindows, WindowOperator, window

pytestmark = pytest.mark.spark

OUTPUT = T.StructType(
    [
        T.StructField("user", T.StringType()),
        T.StructField("window_start", T.LongType()),
        T.StructField("total", T.LongType()),
    ]
)


class SumAmounts(AggregateFunction[Any, int, int]):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + value.amount

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b


class PerWindow(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        for total in elements:
            yield key, context.window.start, total


def operator() -> WindowOperator:
    return window(TumblingWindows(size=timedelta(seconds=10)), element_type=PICKLED).aggregate(
        SumAmounts(), accumulator_type=int, function=PerWindow()
    )


def test_window_operator_open_windows_in_sql_and_restored_at_another_parallelism(
    spark: Any, statecore_home: StatecoreConfig
) -> None:
    schema = "user string, amount long, ts long"

    def run(checkpoint_id: int, rows: list[tuple[str, int, int]], **options: Any) -> Any:
        return keyed_process(
            spark.createDataFrame(rows, schema), key="user", function=operator(),
            output_schema=OUTPUT, job="window_sums", checkpoint_id=checkpoint_id,
            event_time="ts", **options,
        )  # fmt: skip

    first = run(1, [("ann", 1, 1_000), ("bob", 2, 2_000), ("ann", 3, 12_000)], parallelism=1)
    # the watermark (12 s - 1 ms) passed [0, 10 s): it fired; [10 s, 20 s) stays open
    assert sorted(tuple(r) for r in first.output.collect()) == [("ann", 0, 1), ("bob", 0, 2)]
    first.unpersist()

    with Catalog.connect(statecore_home.catalog_url) as catalog:
        views = open_views(catalog, jobs=["window_sums"])
        windows = views.sql(
            "SELECT key, key_group, namespace, value FROM window_sums.window_contents"
        ).to_pylist()
        timers = views.sql("SELECT key, namespace, timestamp FROM window_sums.timers").to_pylist()
        views.connection.close()
    assert windows == [
        {
            "key": "ann",
            "key_group": assign_to_key_group("ann", 128),
            "namespace": "TimeWindow(10000, 20000)",
            "value": 3,
        }
    ]
    assert timers == [{"key": "ann", "namespace": "TimeWindow(10000, 20000)", "timestamp": 19_999}]

    last = run(2, [("ann", 4, 15_000), ("bob", 5, 16_000)], parallelism=2, end_of_input=True)
    assert sorted(tuple(r) for r in last.output.collect()) == [
        ("ann", 10_000, 7),
        ("bob", 10_000, 5),
    ]
    last.unpersist()
