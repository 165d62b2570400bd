"""The exactly-once output table: tasks write, the driver commits with the checkpoint.

Read back with DuckDB (a second Delta reader) and by the run's own ``output``; a checkpoint that
fails before completing commits no output, and the retry leaves each row in the table once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from deltalake import DeltaTable
from duckdb_extensions import import_extension
from pyspark.sql import types as T

from statecore.catalog import Catalog, CheckpointStatus
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.errors import CheckpointCommitError, ConfigError
from statecore.runtime import KeyedProcessFunction
from statecore.spark import keyed_process, keyed_process_batches
from statecore.vectorized import RunningAggregate

from .test_vectorized import INPUT, OUTPUT, TOTAL, PerRecordSum, events, expected_running

pytestmark = pytest.mark.spark


def table_rows(path: Path) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    import_extension("delta", con=con)
    rows = con.execute(f"SELECT user, amount, running FROM delta_scan('{path}')").fetchall()
    con.close()
    return sorted(rows)


def run_per_record(spark: Any, frame: pd.DataFrame, checkpoint_id: int, out: Path) -> Any:
    return keyed_process(
        spark.createDataFrame(frame, INPUT),
        key="user",
        function=PerRecordSum(),
        output_schema=OUTPUT,
        job="sink",
        checkpoint_id=checkpoint_id,
        parallelism=2,
        order_by=["seq"],
        output_table=str(out),
    )


def test_each_checkpoint_appends_its_rows_once(spark, statecore_home, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    first, second = events(0, 300), events(300, 200)
    run1 = run_per_record(spark, first, 1, out)
    assert sorted(map(tuple, run1.output.collect())) == expected_running(first.iloc[:0], first)
    run2 = keyed_process_batches(
        spark.createDataFrame(second, INPUT),
        key="user",
        function=RunningAggregate("amount", TOTAL, output="running"),
        output_schema=OUTPUT,
        job="sink",
        checkpoint_id=2,
        parallelism=2,
        order_by=["seq"],
        output_table=str(out),
    )
    assert sorted(map(tuple, run2.output.collect())) == expected_running(first, second)
    everything = expected_running(first.iloc[:0], pd.concat([first, second]))
    assert table_rows(out) == everything

    replay = run_per_record(spark, second, 2, out)  # a replayed checkpoint: the same rows
    assert replay.replayed
    assert sorted(map(tuple, replay.output.collect())) == expected_running(first, second)
    assert table_rows(out) == everything


def test_a_failure_before_the_completion_is_retried_without_duplicates(
    spark, statecore_home, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    first, second = events(0, 300), events(300, 200)
    run_per_record(spark, first, 1, out)
    real_commit = CheckpointCoordinator.commit

    def crash(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise CheckpointCommitError("the driver died before completing the checkpoint")

    monkeypatch.setattr(CheckpointCoordinator, "commit", crash)
    before_failure = sorted(p.name for p in out.glob("*.parquet"))
    with pytest.raises(CheckpointCommitError, match="driver died"):
        run_per_record(spark, second, 2, out)
    monkeypatch.setattr(CheckpointCoordinator, "commit", real_commit)
    files_before = sorted(p.name for p in out.glob("*.parquet"))
    # the failed attempt's output is staged outside the table (where no Delta tool deletes it)
    staged = {
        p.name for p in (Path(statecore_home.warehouse) / "_pending_outputs").rglob("*.parquet")
    }

    retry = run_per_record(spark, second, 2, out)
    assert retry.checkpoint.status is CheckpointStatus.COMPLETED
    assert sorted(map(tuple, retry.output.collect())) == expected_running(first, second)
    assert table_rows(out) == expected_running(first.iloc[:0], pd.concat([first, second]))
    # the failed attempt's output files were never committed
    committed = {Path(uri).name for uri in DeltaTable(str(out)).file_uris()}
    assert files_before == before_failure  # nothing of it in the table's folder
    assert staged and not committed & staged


def test_an_output_table_with_another_schema_is_refused(spark, statecore_home, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    run_per_record(spark, events(0, 100), 1, out)
    other = T.StructType(
        [
            T.StructField("user", T.StringType()),
            T.StructField("amount", T.DoubleType()),
            T.StructField("running", T.LongType()),
        ]
    )
    before = table_rows(out)
    with pytest.raises(ConfigError, match="has the schema"):
        keyed_process(
            spark.createDataFrame(events(100, 50), INPUT),
            key="user",
            function=PerRecordSum(),
            output_schema=other,
            job="sink",
            checkpoint_id=2,
            parallelism=2,
            output_table=str(out),
        )
    assert table_rows(out) == before
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert catalog.get_checkpoint("sink", 2).status is CheckpointStatus.FAILED


class Stamped(KeyedProcessFunction):
    """Each record's key and event time, as output."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        yield ctx.current_key, value.ts


def test_output_and_late_tables_keep_utc_instants_whatever_the_session_time_zone(  # type: ignore[no-untyped-def]
    spark, statecore_home, tmp_path
) -> None:
    """Delta keeps timestamps as UTC instants (it refuses another zone): with a session in New
    York, the output and late-data tables get the same instants, read back in UTC by DuckDB."""
    stamp = T.StructType(
        [T.StructField("user", T.StringType()), T.StructField("ts", T.TimestampType())]
    )
    at = [datetime(2026, 1, 1, h, tzinfo=UTC) for h in (10, 12, 11)]  # 11:00 is late in run 2
    out, late = tmp_path / "out", tmp_path / "late"
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        for checkpoint_id, rows in ((1, [("u1", at[0]), ("u1", at[1])]), (2, [("u2", at[2])])):
            keyed_process(
                spark.createDataFrame(rows, stamp),
                key="user",
                function=Stamped(),
                output_schema=stamp,
                job="zoned",
                checkpoint_id=checkpoint_id,
                parallelism=1,
                event_time="ts",
                output_table=str(out),
                late_output_table=str(late),
            )
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    con = duckdb.connect()
    import_extension("delta", con=con)
    con.execute("SET TimeZone = 'UTC'")
    written = sorted(con.execute(f"SELECT user, ts FROM delta_scan('{out}')").fetchall())
    dropped = con.execute(f"SELECT user, ts FROM delta_scan('{late}')").fetchall()
    con.close()
    assert [(u, t.astimezone(UTC)) for u, t in written] == [("u1", at[0]), ("u1", at[1])]
    assert [(u, t.astimezone(UTC)) for u, t in dropped] == [("u2", at[2])]
