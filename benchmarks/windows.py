"""A keyed tumbling event-time window sum on the benchmark's events (issue 42's check), three ways
on the same input in one run: statecore's window operator (``statecore.windows``) through
``keyed_process`` on Spark ``local[2]``, Spark's own ``groupBy(key, window(...))``, and Java
Flink's ``TumblingEventTimeWindows`` (:mod:`benchmarks.flink_java`).

Event time is ``seq`` in milliseconds; the window is a quarter of the input (:func:`window_ms`),
so each key has up to four windows. Every window fires (a bounded input's end: statecore's
``end_of_input=True``, Flink's final watermark, Spark's batch aggregation) and each emits
``(key, window_start, total)``. Every run is verified against pandas: the number of windows,
the sum of the totals and a checksum that weights each total by its window's index.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.measure import Sample, TreeRss, clock
from benchmarks.workload import VerificationError, Workload
from statecore.descriptors import AggregateFunction
from statecore.types import PICKLED
from statecore.windows import ProcessWindowFunction, TumblingWindows, WindowOperator, window

__all__ = [
    "SPARK_VARIANT",
    "STATECORE_VARIANT",
    "WindowReference",
    "reference",
    "spark_group_by_window",
    "statecore_window",
    "window_ms",
    "window_operator",
]

STATECORE_VARIANT = "statecore tumbling window sum (heap), Spark local[2] end to end"
SPARK_VARIANT = "Spark groupBy(key, window(...)) sum, local[2]"
WINDOWS = 4


def window_ms(events: int) -> int:
    """The window's size in milliseconds of ``seq``: a quarter of the input (at least 1)."""
    return max(1, -(-events // WINDOWS))


@dataclass(frozen=True)
class WindowReference:
    """What every variant's output must hold."""

    size: int  # the window, in ms
    windows: int  # (key, window) pairs
    total: int  # sum of every window's total
    checksum: int  # sum of total * (window index + 1)

    def check(self, variant: str, output: pa.Table) -> None:
        """``output`` has ``key``, ``window_start`` (ms) and ``total``, a row per window."""
        frame = output.select(["key", "window_start", "total"]).to_pandas()
        starts = frame["window_start"]
        if len(frame) and bool((starts % self.size != 0).any()):
            raise VerificationError(f"{variant}: a window starts off the {self.size} ms grid")
        found = WindowReference(
            self.size,
            len(frame),
            int(frame["total"].sum()),
            int((frame["total"] * (starts // self.size + 1)).sum()),
        )
        if found != self:
            raise VerificationError(
                f"{variant}: windows {found.windows}, total {found.total}, checksum "
                f"{found.checksum}; expected {self.windows}, {self.total}, {self.checksum}"
            )
        if frame.duplicated(["key", "window_start"]).any():
            raise VerificationError(f"{variant}: a key's window was emitted twice")


@lru_cache(maxsize=4)
def _reference(events: int, root: str) -> WindowReference:
    frame = Workload(events, Path(root)).table().to_pandas()
    size = window_ms(events)
    index = frame["seq"] // size
    totals = frame.assign(index=index).groupby(["key", "index"], sort=False)["value"].sum()
    indices = totals.index.get_level_values("index").to_numpy()
    return WindowReference(
        size, len(totals), int(totals.sum()), int((totals.to_numpy() * (indices + 1)).sum())
    )


def reference(workload: Workload) -> WindowReference:
    """The pandas reference of ``workload``'s window sums (computed once per size)."""
    return _reference(workload.events, str(workload.root))


def _output_schema() -> Any:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("key", T.StringType()),
            T.StructField("window_start", T.LongType()),
            T.StructField("total", T.LongType()),
        ]
    )


class SumValues(AggregateFunction[Any, int, int]):
    """The window's aggregate: the sum of its events' ``value``."""

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + value.value

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b


class PerWindow(ProcessWindowFunction):
    """Emits ``(key, window_start, total)`` for the window's one aggregated total."""

    def process(self, key: Any, context: Any, elements: Any) -> Any:
        for total in elements:
            yield key, context.window.start, total


def window_operator(size: int) -> WindowOperator:
    """statecore's tumbling event-time window of ``size`` ms summing ``value``."""
    return window(
        TumblingWindows(size=timedelta(milliseconds=size)), element_type=PICKLED
    ).aggregate(SumValues(), accumulator_type=int, function=PerWindow())


def statecore_window(spark: Any, workload: Workload, workdir: Path) -> Sample:
    """statecore's window operator through ``keyed_process`` at parallelism 2 on the heap
    backend, a fresh job's checkpoint 1, every window fired by the end of the input
    (``end_of_input=True``), the output to the job's Delta output table."""
    from deltalake import DeltaTable

    from statecore.config import StatecoreConfig
    from statecore.spark import keyed_process

    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    output = workdir / "output"
    with TreeRss() as rss:
        start = clock()
        run = keyed_process(
            spark.read.parquet(str(workload.input_dir)),
            key="key",
            function=window_operator(window_ms(workload.events)),
            output_schema=_output_schema(),
            job="bench-window",
            checkpoint_id=1,
            parallelism=2,
            backend="heap",
            config=StatecoreConfig.resolve(home=str(workdir / "home"), env={}),
            event_time="seq",
            end_of_input=True,
            output_table=str(output),
        )
        seconds = clock() - start
    if run.records != workload.events:
        raise VerificationError(f"{STATECORE_VARIANT}: {run.records} records, expected all")
    reference(workload).check(STATECORE_VARIANT, DeltaTable(str(output)).to_pyarrow_table())
    return Sample(STATECORE_VARIANT, seconds, workload.events, rss.peak)


def spark_group_by_window(spark: Any, workload: Workload, workdir: Path) -> Sample:
    """Spark's own batch aggregation: ``groupBy("key", window(timestamp_millis(seq), ...))``
    summing ``value``, written to Parquet."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    shutil.rmtree(workdir, ignore_errors=True)
    size = window_ms(workload.events)
    output = workdir / "output"
    with TreeRss() as rss:
        start = clock()
        events = spark.read.parquet(str(workload.input_dir))
        (
            events.groupBy("key", F.window(F.timestamp_millis("seq"), f"{size} milliseconds"))
            .agg(F.sum("value").alias("total"))
            .select("key", F.unix_millis(F.col("window.start")).alias("window_start"), "total")
            .write.parquet(str(output))
        )
        seconds = clock() - start
    reference(workload).check(SPARK_VARIANT, pq.read_table(output))
    return Sample(SPARK_VARIANT, seconds, workload.events, rss.peak)
