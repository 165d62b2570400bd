"""``keyed_stream`` on the shared Spark session: a file source fed between
``processAllAvailable()`` calls, the watermark persisted with each micro-batch (monotonic, across
a restart of the query, a batch job and a savepoint), event-time timers firing exactly once
across micro-batches, late data, replays, and Spark's ``rate`` source."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest
from duckdb_extensions import import_extension

from statecore.catalog import Catalog, CheckpointStatus
from statecore.checkpoint.points import load_savepoint
from statecore.cli.output import checkpoint_rows
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.ops.savepoint import take_savepoint
from statecore.runtime import KeyedProcessFunction
from statecore.snapshot.changelog import ChangelogConfig
from statecore.spark import keyed_process, keyed_stream
from statecore.spark.executor import per_record
from statecore.spark.keyed import KeyedJob
from statecore.spark.stream import STREAM_METADATA, _MicroBatch

from .stream_job import INPUT, OUTPUT, Reminders, start

pytestmark = pytest.mark.spark


def write_file(folder: Path, name: str, rows: list[tuple[str, int, int]]) -> None:
    """One JSON file of ``(user, ts, amount)`` rows, written whole before Spark can see it, and
    modified a millisecond or more after every file already in ``folder``: Spark's file source
    takes new files in the order of their modification times, in milliseconds, and files of the
    same millisecond in the order the folder lists them (``f001`` before ``f000``, and a stream
    of running totals emits 2, 3, 6 instead of 1, 3, 6)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(dict(zip(("user", "ts", "amount"), r))) + "\n" for r in rows))
    latest_ms = max((f.stat().st_mtime_ns // 1_000_000 for f in folder.iterdir()), default=-1)
    at = max(tmp.stat().st_mtime_ns, (latest_ms + 1) * 1_000_000)
    os.utime(tmp, ns=(at, at))
    tmp.rename(folder / f"{name}.json")


def delta_rows(path: Path, columns: str = "*") -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    import_extension("delta", con=con)
    rows = con.execute(f"SELECT {columns} FROM delta_scan('{path}')").fetchall()
    con.close()
    return sorted(rows)


def totals(config: StatecoreConfig, job: str) -> dict[str, int]:
    from statecore.query import open_views

    with Catalog.connect(config.catalog_url) as catalog:
        views = open_views(catalog, jobs=[job])
        rows = views.sql(f"SELECT key, value FROM {job}.total").to_pylist()
        views.connection.close()
    return {r["key"]: r["value"] for r in rows}


def completed(config: StatecoreConfig, job: str) -> list[Any]:
    with Catalog.connect(config.catalog_url) as catalog:
        if job not in {j.name for j in catalog.list_jobs()}:
            return []
        return sorted(
            catalog.list_checkpoints(job, status=CheckpointStatus.COMPLETED),
            key=lambda c: c.checkpoint_id,
        )


def spec(tmp_path: Path, job: str = "reminders") -> dict[str, Any]:
    return {
        "job": job,
        "input": str(tmp_path / "in"),
        "checkpoint_location": str(tmp_path / "offsets"),
        "output_table": str(tmp_path / "out"),
    }


def test_stream_watermark_timers_and_late_data_across_a_restart(
    spark, statecore_home, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    s = spec(tmp_path)
    late_table = tmp_path / "late"
    inp = Path(s["input"])
    write_file(inp, "f0", [("u1", 1000, 1), ("u2", 2000, 2)])
    query = start(spark, s, late_output_table=str(late_table))
    try:
        query.processAllAvailable()  # batch 0: at MIN; completes with W = 2000
        write_file(inp, "f1", [("u1", 15_000, 3)])
        # batch 1: at 2000; after u1@15000 the task's watermark 14999 fires 11000, 12000
        query.processAllAvailable()  # W = 15000
        write_file(inp, "f2", [("u2", 16_000, 4), ("u1", 14_000, 100)])
        query.processAllAvailable()  # batch 2: at 15000; u1@14000 late
    finally:
        query.stop()
    assert [c.watermark for c in completed(statecore_home, "reminders")] == [2000, 15_000, 16_000]
    query = start(spark, s, late_output_table=str(late_table))  # a restart of the query
    try:
        write_file(inp, "f3", [("u1", 30_000, 5)])
        # batch 3: at 16000; after u1@30000, 29999 fires 25000 (u1) and 26000 (u2)
        query.processAllAvailable()  # W = 30000
        write_file(inp, "f4", [("u3", 31_000, 6)])
        query.processAllAvailable()  # batch 4: at 30000
    finally:
        query.stop()
    checkpoints = completed(statecore_home, "reminders")
    assert [c.checkpoint_id for c in checkpoints] == [0, 1, 2, 3, 4]
    assert [c.watermark for c in checkpoints] == [2000, 15_000, 16_000, 30_000, 31_000]
    out = delta_rows(Path(s["output_table"]))
    timers = [r for r in out if r[1] == "timer"]
    assert sorted(timers) == [
        ("u1", "timer", 11_000, 4, 14_999),  # right after u1@15000 moved the task's watermark
        ("u1", "timer", 25_000, 9, 29_999),  # right after u1@30000, in batch 3
        ("u2", "timer", 12_000, 2, 14_999),
        ("u2", "timer", 26_000, 6, 29_999),
    ]
    assert set(Counter((r[0], r[2]) for r in timers).values()) == {1}, "each timer fires once"
    events = {(r[0], r[2]): (r[3], r[4]) for r in out if r[1] == "event"}
    assert events == {  # (running total, the watermark the micro-batch ran at)
        ("u1", 1000): (1, -(1 << 63)),
        ("u2", 2000): (2, 999),  # after u1@1000 the task's watermark is 1000 - 1 ms
        ("u1", 15_000): (4, 2000),
        ("u2", 16_000): (6, 15_000),
        ("u1", 30_000): (9, 16_000),
        ("u3", 31_000): (6, 30_000),
    }
    assert delta_rows(late_table) == [("u1", 14_000, 100)], "late rows never touch state"
    assert totals(statecore_home, "reminders") == {"u1": 9, "u2": 6, "u3": 6}


def test_stream_continues_a_batch_job_and_back_with_savepoint_watermark(
    spark, statecore_home, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    s = spec(tmp_path, job="mixed")
    batch = spark.createDataFrame([("u1", 5000, 1), ("u2", 7000, 2)], INPUT)
    first = keyed_process(
        batch,
        key="user",
        function=Reminders(),
        output_schema=OUTPUT,
        job="mixed",
        checkpoint_id=20260101,
        event_time="ts",
        parallelism=1,
    )
    assert first.watermark == 7000  # the batch rule: its input's largest event time
    assert sorted(r[2] for r in first.output.collect() if r[1] == "timer") == []
    inp = Path(s["input"])
    write_file(inp, "f0", [("u1", 6000, 10), ("u2", 20_000, 20)])  # u1@6000 is late
    query = start(spark, s, late_data="drop")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    stream_checkpoints = completed(statecore_home, "mixed")
    assert [c.checkpoint_id for c in stream_checkpoints] == [20260101, 20260102]
    assert stream_checkpoints[-1].watermark == 20_000
    meta = json.loads((Path(s["checkpoint_location"]) / STREAM_METADATA).read_text())
    assert meta == {"job": "mixed", "checkpoint_id_base": 20260102}
    fired = {(r[0], r[2]) for r in delta_rows(Path(s["output_table"])) if r[1] == "timer"}
    assert fired == {("u1", 15_000), ("u2", 17_000)}  # u2@20000 moved the watermark past them
    assert totals(statecore_home, "mixed") == {"u1": 1, "u2": 22}  # the late 10 was dropped
    # back to batch: it starts at the stream's watermark, fires the timers it passes
    again = keyed_process(
        spark.createDataFrame([("u1", 40_000, 100)], INPUT),
        key="user",
        function=Reminders(),
        output_schema=OUTPUT,
        job="mixed",
        checkpoint_id=20260200,
        event_time="ts",
        parallelism=1,
    )
    rows = sorted(tuple(r) for r in again.output.collect())
    again.unpersist()
    assert ("u1", "event", 40_000, 101, 20_000) in rows
    assert {(r[0], r[2]) for r in rows if r[1] == "timer"} == {("u2", 30_000)}
    assert again.watermark == 40_000
    # a savepoint carries the watermark; a job restored from it starts there
    config = statecore_home
    with Catalog.connect(config.catalog_url) as catalog:
        point = take_savepoint(config, catalog, "mixed", name="sp")
    assert load_savepoint(point.savepoint or "").watermark == 40_000
    restored = keyed_process(
        spark.createDataFrame([("u1", 39_000, 7), ("u9", 41_000, 1)], INPUT),
        key="user",
        function=Reminders(),
        output_schema=OUTPUT,
        job="copy",
        checkpoint_id=1,
        event_time="ts",
        parallelism=1,
        restore_from=point.savepoint,
        late_data="drop",
    )
    restored.unpersist()
    assert restored.late_rows == 1 and restored.watermark == 41_000
    assert totals(config, "copy")["u1"] == 101


def test_stream_replayed_micro_batch_is_a_no_op(spark, statecore_home, tmp_path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "out"
    job = KeyedJob(
        key="user",
        function=Reminders(),
        process=per_record,
        output_schema=OUTPUT,
        job="replay",
        checkpoint_id=0,
        event_time="ts",
        parallelism=1,
        output_table=str(table),
        stream=True,
    )
    micro_batch = _MicroBatch(job, 0, tick=False)
    df = spark.createDataFrame([("u1", 1000, 1), ("u1", 2000, 2)], INPUT)
    micro_batch(df, 0)
    assert micro_batch.last_run is not None and not micro_batch.last_run.replayed
    micro_batch(df, 0)  # Spark replays a batch whose commit it did not record
    assert micro_batch.last_run.replayed
    assert totals(statecore_home, "replay") == {"u1": 3}
    assert len(delta_rows(table)) == 2
    assert [c.watermark for c in completed(statecore_home, "replay")] == [2000]
    listed = checkpoint_rows(completed(statecore_home, "replay"))  # `statecore checkpoints list`
    assert listed[0]["watermark"] == datetime(1970, 1, 1, 0, 0, 2, tzinfo=UTC)
    assert listed[0]["warm"] == "0/1"  # of the run's one task, none continued a kept state


def test_stream_rate_source_with_processing_time_trigger(spark, statecore_home, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from statecore.descriptors import ValueStateDescriptor
    from statecore.runtime import KeyedProcessFunction

    class Count(KeyedProcessFunction):
        def open(self, ctx: Any) -> None:
            self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))

        def process_element(self, value: Any, ctx: Any) -> Any:
            self.count.update(self.count.value() + 1)
            yield (ctx.current_key, value.value)

    rate = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 20)
        .load()
        .withColumn("k", (F.col("value") % 5).cast("string"))
    )
    out = tmp_path / "out"
    query = keyed_stream(
        rate,
        key="k",
        function=Count(),
        output_schema=T.StructType(
            [T.StructField("k", T.StringType()), T.StructField("value", T.LongType())]
        ),
        job="rate",
        checkpoint_location=str(tmp_path / "offsets"),
        trigger={"processingTime": "1 second"},
        output_table=str(out),
        event_time="timestamp",
        parallelism=2,
    )
    try:
        deadline = time.monotonic() + 180
        while len(completed(statecore_home, "rate")) < 3 and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(0.5)
    finally:
        query.stop()
    checkpoints = completed(statecore_home, "rate")
    assert len(checkpoints) >= 3
    values = [r[0] for r in delta_rows(out, "value")]
    assert len(values) == len(set(values)), "each rate row is processed once"
    from statecore.query import open_views

    with Catalog.connect(statecore_home.catalog_url) as catalog:
        views = open_views(catalog, jobs=["rate"])
        state = views.sql("SELECT sum(value) AS n FROM rate.count").to_pylist()[0]["n"]
        views.connection.close()
    assert state == len(values)
    watermarks = [c.watermark for c in checkpoints if c.watermark is not None]  # none before rows
    assert watermarks == sorted(watermarks) and watermarks


def test_stream_arguments_checked_before_the_query_starts(spark, statecore_home, tmp_path) -> None:  # type: ignore[no-untyped-def]
    s = spec(tmp_path)
    Path(s["input"]).mkdir()
    with pytest.raises(ConfigError, match="streaming DataFrame"):
        keyed_stream(
            spark.createDataFrame([("u", 1, 1)], INPUT),
            key="user",
            function=Reminders(),
            output_schema=OUTPUT,
            job="bad",
            checkpoint_location=s["checkpoint_location"],
        )
    with pytest.raises(ConfigError, match="trigger"):
        start(spark, s, trigger={"processingTime": 5})
    with pytest.raises(ConfigError, match="continuous"):
        start(spark, s, trigger={"continuous": "1 second"})
    with pytest.raises(ConfigError, match="order_by"):
        start(spark, s, order_by=["nope"])
    assert not Path(s["checkpoint_location"]).exists(), "nothing started"


class Ping(KeyedProcessFunction):
    """A processing-time timer ``delay`` ms after each record; the timer reports its key."""

    def __init__(self, delay: int) -> None:
        self.delay = delay

    def process_element(self, value: Any, ctx: Any) -> Any:
        due = ctx.timer_service.current_processing_time() + self.delay
        ctx.timer_service.register_processing_time_timer(due)
        yield ctx.current_key, "event"

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield ctx.current_key, "timer"


class FileClock:
    """A processing-time clock the test sets (epoch ms in a file), read by driver and tasks."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def set(self, now: int) -> None:
        tmp = Path(f"{self.path}.tmp")
        tmp.write_text(str(now))
        tmp.rename(self.path)

    def current_timestamp(self) -> int:
        return int(Path(self.path).read_text())


def test_stream_processing_time_timer_fires_without_data(spark, statecore_home, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import types as T

    s = spec(tmp_path, job="ping")
    write_file(Path(s["input"]), "f0", [("u1", 1000, 1)])
    out = tmp_path / "out"
    clock = FileClock(tmp_path / "clock")
    clock.set(0)
    query = keyed_stream(
        spark.readStream.schema(INPUT).json(s["input"]),
        key="user",
        function=Ping(delay=3000),
        output_schema=T.StructType(
            [T.StructField("user", T.StringType()), T.StructField("what", T.StringType())]
        ),
        job="ping",
        checkpoint_location=s["checkpoint_location"],
        trigger={"processingTime": "500 milliseconds"},
        output_table=str(out),
        parallelism=1,
        processing_time=clock,
    )
    try:
        deadline = time.monotonic() + 180
        while not completed(statecore_home, "ping") and time.monotonic() < deadline:
            time.sleep(0.2)  # the record's micro-batch: a timer at 3000
        seen = len(query.recentProgress)
        while len(query.recentProgress) < seen + 3 and time.monotonic() < deadline:
            time.sleep(0.2)  # idle micro-batches: no record, no timer due
        assert len(completed(statecore_home, "ping")) == 1
        clock.set(5000)
        while time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            if out.exists() and ("u1", "timer") in delta_rows(out):
                break
            time.sleep(0.5)
        seen = len(query.recentProgress)
        while len(query.recentProgress) < seen + 2 and time.monotonic() < deadline:
            time.sleep(0.2)  # idle again (the timer fired)
        # a record after idle micro-batches (skipped by their offsets, no Spark job) is processed
        write_file(Path(s["input"]), "f1", [("u2", 6000, 1)])
        while time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            if ("u2", "event") in delta_rows(out):
                break
            time.sleep(0.5)
        progress = list(query.recentProgress)
    finally:
        query.stop()
    assert sorted(delta_rows(out)) == [("u1", "event"), ("u1", "timer"), ("u2", "event")]
    # micro-batches with no record and no timer due ran without a checkpoint
    checkpoints = completed(statecore_home, "ping")
    assert len(checkpoints) == 3
    assert len(progress) > len(checkpoints)
    idle = sorted(p["durationMs"]["triggerExecution"] for p in progress[1:])
    print(f"idle micro-batches: {len(idle)}, median {idle[len(idle) // 2]} ms, max {idle[-1]} ms")


def test_stream_watermark_survives_catalog_recover(spark, statecore_home, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from statecore.checkpoint.recover import recover_catalog

    for checkpoint_id, rows in enumerate([[("u1", 5000, 1)], [("u1", 9000, 2)]], 1):
        run = keyed_process(
            spark.createDataFrame(rows, INPUT),
            key="user",
            function=Reminders(),
            output_schema=OUTPUT,
            job="lost",
            checkpoint_id=checkpoint_id,
            event_time="ts",
            parallelism=1,
        )
        run.unpersist()
    with Catalog.connect(f"sqlite:///{tmp_path / 'new.db'}") as catalog:
        recover_catalog(statecore_home, catalog, "lost")
        marks = [c.watermark for c in catalog.list_checkpoints("lost")]
    assert marks == [5000, 9000]


def test_stream_materializes_changes_every_third_and_readers_merge_them(
    spark, statecore_home, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """A stream's checkpoints append change files (its default), a key group's third change
    rewrites it whole into the state table, and until then statecore's readers merge the
    pending changes while a plain Delta reader of the state table sees the materialized rows."""
    s = spec(tmp_path, job="logged")
    inp = Path(s["input"])
    users = [f"u{i:02}" for i in range(40)]
    every_third = ChangelogConfig(materialize_every=3, max_change_ratio=100.0)  # not by rows

    def state_table() -> dict[str, int]:
        with Catalog.connect(statecore_home.catalog_url) as catalog:
            latest = catalog.latest_checkpoint("logged")
        assert latest is not None
        table = next(t for t in latest.tables if (t.table_kind, t.state) == ("keyed", "total"))
        return dict(delta_rows(Path(table.path), "key, value"))

    write_file(inp, "f0", [(u, 1000, 1) for u in users])
    query = start(spark, s, changelog=every_third)
    try:
        query.processAllAvailable()
        for n in (1, 2, 3):  # u01 changes alone: a change file, a second one, then materialized
            write_file(inp, f"f{n}", [("u01", 1000 + n, 1)])
            query.processAllAvailable()
            if n == 2:
                assert state_table()["u01"] == 1 and totals(statecore_home, "logged")["u01"] == 3
    finally:
        query.stop()
    materialized = {**dict.fromkeys(users, 1), "u01": 4}
    assert state_table() == totals(statecore_home, "logged") == materialized
