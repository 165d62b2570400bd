"""The DataStream layer's parts: PyFlink's ``Row``, values read back as PyFlink gives them on
both backends, what has no counterpart (``PyFlinkUnsupportedError`` naming what to use), the
Delta sink with the job's state in SQL, and a stream that runs until cancelled."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.errors import PyFlinkUnsupportedError
from statecore.pyflink.common import Duration, Row, Types, WatermarkStrategy
from statecore.pyflink.datastream import (
    KeyedProcessFunction,
    RuntimeContext,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from statecore.pyflink.datastream.connectors import DeltaSink, FileSource, StreamFormat
from statecore.pyflink.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from statecore.query import run_sql
from statecore.snapshot.storage import open_table
from statecore.testing import KeyedProcessFunctionHarness
from tests.pyflink.jobs import ttl_counter


def test_datastream_row_is_pyflinks_row() -> None:
    row = Row(name="ann", count=1)
    row[1] += 1
    row.count += 1
    assert (row.name, row["count"], row[0], len(row)) == ("ann", 3, "ann", 3 - 1)
    assert row.as_dict() == {"name": "ann", "count": 3}
    assert pickle.loads(pickle.dumps(row)) == row and repr(row) == "Row(name='ann', count=3)"
    assert Row("a", 1) == ("a", 1) and Row("name", "n")("bob", 2) == Row(name="bob", n=2)
    with pytest.raises(AttributeError):
        row.missing  # noqa: B018


class Remember(KeyedProcessFunction):
    """Writes a row, a tuple, a map and a list of rows, and reads them back."""

    def open(self, runtime_context: RuntimeContext):
        row = Types.ROW_NAMED(["user", "n"], [Types.STRING(), Types.LONG()])
        self.row = runtime_context.get_state(ValueStateDescriptor("row", row))
        pair = Types.TUPLE([Types.STRING(), Types.INT()])
        self.pair = runtime_context.get_state(ValueStateDescriptor("pair", pair))
        counts = Types.MAP(Types.STRING(), Types.LONG())
        self.counts = runtime_context.get_state(ValueStateDescriptor("counts", counts))
        self.rows = runtime_context.get_list_state(ListStateDescriptor("rows", row))
        self.by_name = runtime_context.get_map_state(
            MapStateDescriptor("by_name", Types.STRING(), row)
        )

    def process_element(self, value, ctx: KeyedProcessFunction.Context):
        self.row.update(Row(user=value, n=1))
        self.pair.update((value, 2))
        self.counts.update({value: 3})
        self.rows.add(Row(user=value, n=4))
        self.by_name.put(value, Row(user=value, n=5))
        yield self.row.value(), self.pair.value(), self.counts.value()
        yield list(self.rows.get()), self.by_name.get(value), dict(self.by_name.items())


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_datastream_values_read_back_as_pyflink_gives_them(backend: str) -> None:
    """ROW → Row (named), TUPLE → tuple, MAP → dict, on the heap and from RocksDB (which stores
    a struct and a map in their Arrow form: without the layer, a dict and a list of pairs)."""
    with KeyedProcessFunctionHarness(Remember(), key=lambda e: e, backend=backend) as harness:
        (row, pair, counts), (rows, by_name, items) = harness.process_element("ann")
    assert type(row) is Row and row.user == "ann" and row == Row(user="ann", n=1)
    assert type(pair) is tuple and pair == ("ann", 2)
    assert counts == {"ann": 3} and type(counts) is dict
    assert rows == [Row(user="ann", n=4)] and type(rows[0]) is Row
    assert by_name == Row(user="ann", n=5) and items == {"ann": Row(user="ann", n=5)}


def test_datastream_what_has_no_counterpart_names_what_to_use() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    ds = env.from_collection([("a", 1)])
    cases = [
        (lambda: ds.window_all(None), "give a window assigner"),
        (lambda: ds.key_by(lambda e: e[0]).window(None), "give a window assigner"),
        (lambda: env.add_source(None), "from_source"),
        (
            lambda: ds.key_by(lambda e: e[0]).reduce(lambda a, b: a).union(ds),
            "union the streams before it",
        ),
        (lambda: ds.process(None), "key_by"),
        (
            lambda: WatermarkStrategy.no_watermarks().with_timestamp_assigner(lambda e, t: 0),
            "for_bounded_out_of_orderness",
        ),
        (
            lambda: ds.key_by(lambda e: e[0]).reduce(lambda a, b: a).key_by(lambda e: e[0]),
            "DeltaSink",
        ),
        (lambda: FileSource.for_bulk_file_format(None), "text_line_format"),
        (lambda: Types.BIG_INT(), "decimal128"),
    ]
    for call, instead in cases:
        with pytest.raises(PyFlinkUnsupportedError, match=instead):
            call()


@pytest.mark.spark
def test_datastream_delta_sink_and_state_in_sql(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    """``sink_to(DeltaSink(path))`` makes the ROW_NAMED output a Delta table with its fields as
    columns; the job ``ttl_counter`` has its checkpoint in the catalog and its state in SQL."""
    table = str(tmp_path / "counts")
    result = ttl_counter.ttl_counter(mode=RuntimeExecutionMode.BATCH, sink=DeltaSink(table))
    rows = open_table(table).to_pyarrow_table().to_pylist()
    assert sorted((r["word"], r["count"]) for r in rows) == [
        ("flink", 1), ("flink", 2), ("flink", 3), ("spark", 1), ("state", 1)
    ]  # fmt: skip
    assert result.checkpoints == [0]
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        state = run_sql(
            catalog, "SELECT key, value FROM ttl_counter.count ORDER BY key", job="ttl_counter"
        ).to_pylist()
    assert state == [
        {"key": "flink", "value": 3}, {"key": "spark", "value": 1}, {"key": "state", "value": 1}
    ]  # fmt: skip


class Count(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx: KeyedProcessFunction.Context):
        self.count.update((self.count.value() or 0) + 1)
        yield value, self.count.value()


@pytest.mark.spark
def test_datastream_monitored_files_run_until_cancelled(
    spark: Any,
    statecore_home: StatecoreConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An unbounded source (``monitor_continuously``) is a query with the checkpointing
    interval as its trigger: files added later are read, each micro-batch a checkpoint whose
    output is printed once it completed; ``cancel()`` stops it."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "1.txt").write_text("a\nb\n")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(500)
    source = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(folder))
        .monitor_continuously(Duration.of_seconds(1))
        .build()
    )
    env.from_source(source, WatermarkStrategy.no_watermarks(), "words").key_by(
        lambda w: w, key_type=Types.STRING()
    ).process(Count(), output_type=Types.TUPLE([Types.STRING(), Types.LONG()])).print()
    client = env.execute_async("monitored")
    seen: list[str] = []

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 120
        while len(seen) < count and time.monotonic() < deadline:
            time.sleep(0.5)
            seen.extend(capsys.readouterr().out.splitlines())

    wait_for(2)
    (folder / "2.txt").write_text("a\n")
    wait_for(3)
    client.cancel()
    assert sorted(seen[:2]) == ["(a,1)", "(b,1)"] and seen[2:] == ["(a,2)"]
    assert len(client.wait().checkpoints) >= 2
