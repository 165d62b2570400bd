"""Side outputs on Spark: each tag's values go to their own Delta table, committed exactly once
with the checkpoint as the main output is (read back by DuckDB); a tag with no table fails the
run before anything of it is committed, unless the user asked to drop its values."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from duckdb_extensions import import_extension
from pyspark.sql import types as T

from statecore import OutputTag
from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import ConfigError
from statecore.runtime import Context, KeyedProcessFunction, OnTimerContext, RuntimeContext
from statecore.spark import SideOutput, keyed_process, keyed_stream

pytestmark = pytest.mark.spark

INPUT = "user string, ts long, amount long"
OUTPUT = T.StructType([T.StructField("user", T.StringType()), T.StructField("total", T.LongType())])
BIG_SCHEMA = T.StructType(
    [T.StructField("user", T.StringType()), T.StructField("amount", T.LongType())]
)
IDLE_SCHEMA = T.StructType(
    [
        T.StructField("user", T.StringType()),
        T.StructField("at", T.LongType()),
        T.StructField("total", T.LongType()),
    ]
)
BIG = OutputTag("big")
IDLE = OutputTag("idle")


class Totals(KeyedProcessFunction):
    """A running total per user (main output); amounts of 50 or more also to ``big``; a user's
    total at 1 s of event time after each record to ``idle``, from its timer."""

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        self.total.update(self.total.value() + value.amount)
        if value.amount >= 50:
            ctx.output(BIG, (ctx.current_key, value.amount))
        assert ctx.timestamp is not None
        ctx.timer_service.register_event_time_timer(ctx.timestamp + 1_000)
        yield ctx.current_key, self.total.value()

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> None:
        ctx.output(IDLE, (ctx.current_key, timestamp, self.total.value()))


def _run(spark: Any, tmp_path: Path, checkpoint_id: int, rows: list[Any], **options: Any) -> Any:
    job = options.pop("job", "side")
    arguments: dict[str, Any] = {
        "output_table": str(tmp_path / "out"),
        "side_outputs": {
            BIG: SideOutput(table=str(tmp_path / "big"), schema=BIG_SCHEMA),
            "idle": SideOutput(table=str(tmp_path / "idle"), schema=IDLE_SCHEMA),
        },
        **options,
    }
    return keyed_process(
        spark.createDataFrame(rows, INPUT), key="user", function=Totals(), output_schema=OUTPUT,
        job=job, checkpoint_id=checkpoint_id, event_time="ts",
        parallelism=2, **arguments,
    )  # fmt: skip


def _table(path: Path) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    import_extension("delta", con=con)
    try:
        return sorted(con.execute(f"SELECT * FROM delta_scan('{path}')").fetchall())
    finally:
        con.close()


def test_side_output_tables_commit_with_each_checkpoint_batch(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    """The side outputs are backend-independent (the harness tests run both backends); the
    run uses RocksDB."""
    backend = "rocksdb"
    first = [("u1", 1_000, 10), ("u1", 2_000, 60), ("u2", 1_500, 70)]
    _run(spark, tmp_path, 1, first, backend=backend)
    assert _table(tmp_path / "big") == [("u1", 60), ("u2", 70)]
    # the watermark ends at 2 s: u1's timer at 2 s fired (u2's at 2.5 s and u1's at 3 s wait)
    assert _table(tmp_path / "idle") == [("u1", 2_000, 70)]
    second = [("u2", 9_000, 5), ("u3", 9_500, 99)]
    run = _run(spark, tmp_path, 2, second, backend=backend, end_of_input=True)
    assert sorted(tuple(r) for r in run.output.collect()) == [("u2", 75), ("u3", 99)]
    assert _table(tmp_path / "big") == [("u1", 60), ("u2", 70), ("u3", 99)]
    # u2's timer at 2.5 s fires once its record at 9 s moved the watermark past it (after the
    # record, as in Flink), so it reports 75; end_of_input fires the rest
    assert _table(tmp_path / "idle") == [
        ("u1", 2_000, 70), ("u1", 3_000, 70), ("u2", 2_500, 75), ("u2", 10_000, 75),
        ("u3", 10_500, 99),
    ]  # fmt: skip
    replay = _run(spark, tmp_path, 2, second, backend=backend, end_of_input=True)
    assert replay.replayed
    assert len(_table(tmp_path / "idle")) == 5  # a replay commits nothing twice
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert catalog.pending_outputs("side") == []


def test_side_output_without_a_table_fails_the_run_and_commits_nothing(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    only_big = {BIG: SideOutput(table=str(tmp_path / "big"), schema=BIG_SCHEMA)}
    with pytest.raises(Exception, match="side output 'idle', which the run has no table for"):
        _run(spark, tmp_path, 1, [("u1", 1_000, 60)], side_outputs=only_big, end_of_input=True)
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert catalog.get_checkpoint("side", 1).status is CheckpointStatus.FAILED
    assert not (tmp_path / "big").exists() and not (tmp_path / "out").exists()
    # the user says the idle values may go: the run completes without them
    dropped = {**only_big, IDLE: None}
    _run(spark, tmp_path, 1, [("u1", 1_000, 60)], side_outputs=dropped, end_of_input=True)
    assert _table(tmp_path / "big") == [("u1", 60)]
    assert _table(tmp_path / "out") == [("u1", 60)]


@pytest.mark.parametrize(
    ("side_outputs", "message"),
    [
        ({"late-data": None}, "'late-data' is the late-data table's"),
        ({"big": "/tmp/big"}, r"give a SideOutput\(table=..., schema=...\) or None"),
        ({"a/b": None}, "side output name 'a/b'"),
        ({BIG: None, "big": None}, "side output 'big' is given twice"),
        ({BIG: SideOutput(table="OUT", schema=BIG_SCHEMA)}, "is given for two outputs"),
    ],
)
def test_side_output_mistakes_are_refused_before_anything_runs(
    spark: Any,
    statecore_home: StatecoreConfig,
    tmp_path: Path,
    side_outputs: dict[Any, Any],
    message: str,
) -> None:
    for output in side_outputs.values():  # the main output's table, named in the case
        if isinstance(output, SideOutput) and output.table == "OUT":
            object.__setattr__(output, "table", str(tmp_path / "out"))
    with pytest.raises(ConfigError, match=message):
        _run(spark, tmp_path, 1, [("u1", 1, 1)], side_outputs=side_outputs, job="wrong")
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert "wrong" not in {j.name for j in catalog.list_jobs()}


def test_side_output_schema_must_be_a_struct_type() -> None:
    with pytest.raises(ConfigError, match="schema must be a pyspark StructType"):
        SideOutput(table="/x", schema="user string")  # type: ignore[arg-type]


def test_side_output_docs_example_runs_on_spark(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, monkeypatch: Any
) -> None:
    """docs/side-outputs.md's examples, in the page's order: the harness block defines
    ``Totals`` and ``ALERTS``, the Spark block runs them; its tables read back by DuckDB."""
    page = Path(__file__).resolve().parents[2] / "docs" / "side-outputs.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"spark": spark, "__name__": "side_outputs_page"}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)
    assert _table(tmp_path / "out" / "totals") == [("s1", 10), ("s1", 80), ("s2", 5)]
    assert _table(tmp_path / "out" / "alerts") == [("s1", 70)]


def test_side_output_stream_commits_with_each_micro_batch(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    """A stream's micro-batches each commit their side outputs' rows with their checkpoint;
    a timer's side output fires in the micro-batch whose records pass it (Spark's watermark
    rule: a micro-batch runs at the watermark its predecessor completed with)."""
    from .test_stream import write_file

    inp = tmp_path / "in"
    write_file(inp, "f0", [("u1", 1_000, 60), ("u2", 1_500, 5)])
    query = keyed_stream(
        spark.readStream.schema(INPUT).json(str(inp)), key="user", function=Totals(),
        output_schema=OUTPUT, job="side_stream", checkpoint_location=str(tmp_path / "offsets"),
        output_table=str(tmp_path / "out"), event_time="ts", parallelism=1,
        side_outputs={
            BIG: SideOutput(table=str(tmp_path / "big"), schema=BIG_SCHEMA),
            IDLE: SideOutput(table=str(tmp_path / "idle"), schema=IDLE_SCHEMA),
        },
    )  # fmt: skip
    try:
        query.processAllAvailable()  # batch 0: no timer due (the watermark starts at MIN)
        assert _table(tmp_path / "big") == [("u1", 60)]
        assert _table(tmp_path / "idle") == []  # the table is made when the run is planned
        write_file(inp, "f1", [("u1", 9_000, 80)])
        # batch 1: u1@9000 moves the one task's watermark past u1's 2000 and u2's 2500
        query.processAllAvailable()
    finally:
        query.stop()
    assert _table(tmp_path / "big") == [("u1", 60), ("u1", 80)]
    assert _table(tmp_path / "idle") == [("u1", 2_000, 140), ("u2", 2_500, 5)]
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert catalog.pending_outputs("side_stream") == []
