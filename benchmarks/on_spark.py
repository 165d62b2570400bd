"""Variants 3 and 4 on one Spark ``local[2]`` session: statecore end to end, and Spark's own
``transformWithStateInPandas`` / ``transformWithState`` on the RocksDB state store.

Each run reads the same Parquet file, processes every event and writes every output row
(consuming it): statecore to its exactly-once Delta output table (`output_table`, committed with
the checkpoint), Spark's variants to a Parquet sink. The timing covers all of that, including
statecore's checkpoint (snapshot, Delta commit, catalog) and Spark's state-store commit. The
output is read back and verified after the timing.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
from pyspark.sql import Row, SparkSession
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from benchmarks.measure import Sample, TreeRss, clock
from benchmarks.workload import Workload
from statecore.spark.session import build_session

__all__ = [
    "session",
    "statecore_end_to_end",
    "dict_on_spark",
    "spark_transform_with_state",
    "OUTPUT_SCHEMA",
    "INPUT_SCHEMA",
]

REPO = Path(__file__).resolve().parents[1]
PARALLELISM = 2
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

INPUT_SCHEMA = T.StructType(
    [
        T.StructField("key", T.StringType()),
        T.StructField("value", T.LongType()),
        T.StructField("seq", T.LongType()),
    ]
)
OUTPUT_SCHEMA = T.StructType(
    [
        T.StructField("key", T.StringType()),
        T.StructField("value", T.LongType()),
        T.StructField("new_sum", T.LongType()),
    ]
)
_TOTAL_SCHEMA = T.StructType([T.StructField("total", T.LongType())])


def session(extra: dict[str, str] | None = None) -> SparkSession:
    """The harness's one Spark session: ``local[2]``, 2 shuffle partitions, RocksDB state;
    ``extra``: further settings (e.g. the event log of ``benchmarks.spark_breakdown``)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p
    )
    spark: SparkSession = build_session(
        master=f"local[{PARALLELISM}]",
        app_name="statecore-bench",
        config={
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "4g",
            "spark.sql.shuffle.partitions": str(PARALLELISM),
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
            **(extra or {}),
        },
        log_level="ERROR",
    )
    return spark


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _verify_output(workload: Workload, variant: str, folder: Path) -> None:
    """Check every output row; a Delta output table is read at its latest version."""
    if (folder / "_delta_log").is_dir():
        from deltalake import DeltaTable

        table = DeltaTable(str(folder)).to_pyarrow_table()
    else:
        table = pq.read_table(folder, schema=None)
    workload.reference.check_output(variant, table, workload.events)


# -- statecore -----------------------------------------------------------------------------


def statecore_end_to_end(
    spark: SparkSession,
    workload: Workload,
    backend: str,
    workdir: Path,
    *,
    vectorized: bool = False,
    verify: bool = True,
) -> Sample:
    """3. ``keyed_process`` running ``RunningSum`` per record at parallelism 2, checkpoint 1 of a
    fresh job, the output to the job's Delta output table. With ``vectorized``: 3c.,
    ``keyed_process_batches`` with ``RunningAggregate``, the same state and checkpoint computed
    per keyed batch (state read and written once per key and batch). Without ``verify`` the
    caller verifies the output (``<workdir>/output``) itself, in another process."""
    from benchmarks.functions import TOTAL, RunningSum
    from statecore.config import StatecoreConfig
    from statecore.spark import keyed_process, keyed_process_batches
    from statecore.vectorized import RunningAggregate

    variant = (
        f"statecore vectorized ({backend}), Spark local[2] end to end"
        if vectorized
        else f"statecore {backend}, Spark local[2] end to end"
    )
    run_dir = _fresh(workdir)
    config = StatecoreConfig.resolve(home=str(run_dir / "home"), env={})
    output = run_dir / "output"
    common: dict[str, Any] = dict(
        key="key",
        output_schema=OUTPUT_SCHEMA,
        job="bench",
        checkpoint_id=1,
        parallelism=PARALLELISM,
        order_by=["seq"],
        backend=backend,
        config=config,
        output_table=str(output),
    )
    with TreeRss() as rss:
        start = clock()
        events = spark.read.schema(INPUT_SCHEMA).parquet(str(workload.input_dir))
        if vectorized:
            run = keyed_process_batches(
                events, function=RunningAggregate("value", TOTAL, output="new_sum"), **common
            )
        else:
            run = keyed_process(events, function=RunningSum(), **common)
        seconds = clock() - start
    spark.catalog.clearCache()
    if run.records != workload.events:
        raise AssertionError(f"{variant}: {run.records} records, expected {workload.events}")
    if verify:
        _verify_output(workload, variant, output)
    checkpoint = run.checkpoint
    return Sample(
        variant,
        seconds,
        workload.events,
        rss.peak,
        extra={
            "state_rows": checkpoint.total_rows,
            "state_bytes": checkpoint.total_bytes,
            "checkpoint_seconds": checkpoint.duration.total_seconds()
            if checkpoint.duration
            else None,
            "home": str(run_dir / "home"),
        },
    )


def _dict_task(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    state: dict[str, int] = {}
    get = state.get
    for batch in batches:
        keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
        sums: list[int] = []
        append = sums.append
        for key, value in zip(keys, values):
            total = get(key, 0) + value
            state[key] = total
            append(total)
        yield pa.RecordBatch.from_arrays(
            [batch.column("key"), batch.column("value"), pa.array(sums, pa.int64())],
            names=["key", "value", "new_sum"],
        )


def dict_on_spark(spark: SparkSession, workload: Workload, workdir: Path) -> Sample:
    """3b. The per-record ceiling on Spark: statecore's shuffle and sort, then a plain dict per
    task in ``mapInArrow``; no state backend, no checkpoint."""
    from statecore.spark.partitioning import align_to_key_groups

    variant = "dict loop, Spark local[2] (same shuffle + sort, no checkpoint)"
    run_dir = _fresh(workdir)
    output = run_dir / "output"
    with TreeRss() as rss:
        start = clock()
        events = spark.read.schema(INPUT_SCHEMA).parquet(str(workload.input_dir))
        aligned = align_to_key_groups(
            events, "key", parallelism=PARALLELISM, max_parallelism=128, order_by=["seq"]
        )
        aligned.select("key", "value").mapInArrow(_dict_task, OUTPUT_SCHEMA).write.parquet(
            str(output)
        )
        seconds = clock() - start
    _verify_output(workload, variant, output)
    return Sample(variant, seconds, workload.events, rss.peak)


# -- Spark's transformWithState ------------------------------------------------------------


class PandasRunningSum(StatefulProcessor):
    """The workload for ``transformWithStateInPandas``: one state read and write per key and
    micro-batch (the idiomatic, cheapest use), a vectorized running sum over the key's rows."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.total = handle.getValueState("total", _TOTAL_SCHEMA)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True).sort_values("seq")
        stored = self.total.get()
        sums = frame["value"].cumsum() + (stored[0] if stored else 0)
        self.total.update((int(sums.iloc[-1]),))
        yield pd.DataFrame({"key": key[0], "value": frame["value"], "new_sum": sums})

    def close(self) -> None:
        pass


class RowRunningSum(StatefulProcessor):
    """The workload for ``transformWithState`` (Row API): one state read and write per key and
    micro-batch, a Python loop over the key's rows in ``seq`` order."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.total = handle.getValueState("total", _TOTAL_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        stored = self.total.get()
        total = stored[0] if stored else 0
        name = key[0]
        for row in sorted(rows, key=lambda r: r.seq):
            total += row.value
            yield Row(key=name, value=row.value, new_sum=total)
        self.total.update((total,))

    def close(self) -> None:
        pass


def spark_transform_with_state(
    spark: SparkSession, workload: Workload, *, pandas: bool, workdir: Path
) -> Sample:
    """4. A file-source stream over the same Parquet file, ``availableNow``, Parquet sink."""
    api = "transformWithStateInPandas" if pandas else "transformWithState"
    variant = f"Spark {api}, RocksDB store, local[2]"
    run_dir = _fresh(workdir)
    output = run_dir / "output"
    with TreeRss() as rss:
        start = clock()
        stream = spark.readStream.schema(INPUT_SCHEMA).parquet(str(workload.input_dir))
        grouped = stream.groupBy("key")
        if pandas:
            result = grouped.transformWithStateInPandas(
                PandasRunningSum(),
                outputStructType=OUTPUT_SCHEMA,
                outputMode="Append",
                timeMode="None",
            )
        else:
            result = grouped.transformWithState(
                RowRunningSum(),
                outputStructType=OUTPUT_SCHEMA,
                outputMode="Append",
                timeMode="None",
            )
        query = (
            result.writeStream.format("parquet")
            .option("path", str(output))
            .option("checkpointLocation", str(run_dir / "checkpoint"))
            .outputMode("append")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        seconds = clock() - start
    if query.exception() is not None:
        raise RuntimeError(f"{variant}: {query.exception()}")
    _verify_output(workload, variant, output)
    state_dir = run_dir / "checkpoint" / "state"
    state_bytes = sum(f.stat().st_size for f in state_dir.rglob("*") if f.is_file())
    return Sample(
        variant, seconds, workload.events, rss.peak, extra={"state_store_bytes": state_bytes}
    )
