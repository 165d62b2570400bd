"""Late records (event time at or below the watermark a run starts from) reach
``process_element`` by default, as in Flink; ``late_data="drop"`` and ``"table"`` are the
statecore extensions that keep them away from state; a wrong choice is refused before anything
runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from duckdb_extensions import import_extension
from pyspark.sql import types as T

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import ConfigError
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.spark import keyed_process

pytestmark = pytest.mark.spark

INPUT = "user string, ts long, amount long"
OUTPUT = T.StructType(
    [
        T.StructField("user", T.StringType()),
        T.StructField("ts", T.LongType()),
        T.StructField("total", T.LongType()),
        T.StructField("late", T.BooleanType()),
    ]
)


class Totals(KeyedProcessFunction):
    """A running total per user; each record says whether it was behind the watermark."""

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        assert ctx.timestamp is not None
        self.total.update(self.total.value() + value.amount)
        late = ctx.timestamp <= ctx.timer_service.current_watermark()
        yield ctx.current_key, ctx.timestamp, self.total.value(), late


def _run(spark: Any, job: str, checkpoint_id: int, rows: list[Any], **options: Any) -> Any:
    return keyed_process(
        spark.createDataFrame(rows, INPUT), key="user", function=Totals(), output_schema=OUTPUT,
        job=job, checkpoint_id=checkpoint_id, event_time="ts", parallelism=1, **options,
    )  # fmt: skip


def _output(run: Any) -> list[tuple[Any, ...]]:
    rows = sorted(tuple(r) for r in run.output.collect())
    run.unpersist()
    return rows


def test_late_record_reaches_process_element_by_default(
    spark: Any, statecore_home: StatecoreConfig
) -> None:
    first = _run(spark, "late", 1, [("u1", 10_000, 1), ("u2", 12_000, 2)])
    assert first.watermark == 12_000 and _output(first)
    second = _run(spark, "late", 2, [("u1", 5_000, 10), ("u1", 20_000, 100), ("u2", 12_000, 20)])
    assert second.late_rows == 2  # counted, and processed
    assert _output(second) == [
        ("u1", 5_000, 11, True),  # the function sees it is late and decides what to do
        ("u1", 20_000, 111, False),
        ("u2", 12_000, 22, True),  # at the watermark is late too
    ]
    assert second.watermark == 20_000  # late records do not move the watermark


@pytest.mark.parametrize("mode", ["drop", "table"])
def test_late_record_drop_and_table_keep_it_away_from_state(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, mode: str
) -> None:
    late_table = tmp_path / "late"
    options: dict[str, Any] = (
        {"late_data": "drop"} if mode == "drop" else {"late_output_table": str(late_table)}
    )
    _run(spark, mode, 1, [("u1", 10_000, 1)], **options).unpersist()
    second = _run(spark, mode, 2, [("u1", 5_000, 10), ("u1", 20_000, 100)], **options)
    assert second.late_rows == 1
    assert _output(second) == [("u1", 20_000, 101, False)]
    if mode == "table":
        con = duckdb.connect()
        import_extension("delta", con=con)
        assert con.execute(f"SELECT * FROM delta_scan('{late_table}')").fetchall() == [
            ("u1", 5_000, 10)
        ]
    else:
        assert not late_table.exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"late_data": "ignore"}, "late_data='ignore' is not one of 'process', 'drop', 'table'"),
        ({"late_data": "table"}, "late_data='table' and late_output_table= go together"),
        ({"late_data": "drop", "late_output_table": "/x"}, "go together"),
        ({"late_data": "drop", "event_time": None}, "late_data='drop' needs an event_time"),
    ],
)
def test_late_record_mode_mistakes_are_refused_before_anything_runs(
    spark: Any, statecore_home: StatecoreConfig, options: dict[str, Any], message: str
) -> None:
    df = spark.createDataFrame([("u1", 1, 1)], INPUT)
    arguments: dict[str, Any] = {"event_time": "ts", **options}
    with pytest.raises(ConfigError, match=message):
        keyed_process(
            df, key="user", function=Totals(), output_schema=OUTPUT, job="wrong",
            checkpoint_id=1, parallelism=1, **arguments,
        )  # fmt: skip
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert "wrong" not in {j.name for j in catalog.list_jobs()}
