"""The three PyFlink jobs (tests/pyflink/jobs: PyFlink code but for the imports) on Spark,
through ``keyed_process`` as any statecore job, with the outputs Flink gives for the same input
in the same order: timers fire between records, late records reach the function, a bounded
input ends with Flink's final watermark (``end_of_input=True``), TTL follows the run's
processing-time clock."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pyspark.sql import types as T

from statecore.config import StatecoreConfig
from statecore.spark import keyed_process
from statecore.ttl import ManualTimeProvider
from tests.pyflink.jobs.count_with_ttl import CountWithTtl
from tests.pyflink.jobs.deduplicate import Deduplicate
from tests.pyflink.jobs.session_timeout import SessionTimeout

pytestmark = pytest.mark.spark

KEY_COUNT = T.StructType(
    [T.StructField("key", T.StringType()), T.StructField("count", T.LongType())]
)
T0 = 1_800_000_000_000


def _rows(run: Any) -> list[tuple[Any, ...]]:
    rows = [tuple(r) for r in run.output.collect()]
    run.unpersist()
    return rows


def test_pyflink_session_timeout_on_spark_gives_flinks_output(
    spark: Any, statecore_home: StatecoreConfig
) -> None:
    """The harness test's elements in event-time order (as a Spark task processes them): in
    Flink, with the watermark 1 s behind after each element, every session stays open until
    the end of input, which closes b's (3 elements), a's (4) and c's (1) in timer order.
    (b, 8000) is not late here: in this order it comes before (c, 10500) moved the watermark.)"""
    elements = [("a", 1, 1000), ("b", 1, 2000), ("a", 2, 3000), ("b", 2, 4000)]
    elements += [("a", 3, 6500), ("c", 1, 10500), ("b", 3, 8000), ("a", 4, 10000)]
    run = keyed_process(
        spark.createDataFrame(elements, "key string, n long, ts long"), key="key",
        function=SessionTimeout(), output_schema=KEY_COUNT, job="sessions", checkpoint_id=1,
        parallelism=1, event_time="ts", allowed_lateness=timedelta(seconds=1), end_of_input=True,
    )  # fmt: skip
    assert _rows(run) == [("b", 3), ("a", 4), ("c", 1)]


def test_pyflink_session_timeout_on_spark_late_element_reaches_the_function(
    spark: Any, statecore_home: StatecoreConfig
) -> None:
    """A day's run ends at the watermark 9500 (its largest event time minus the lateness), which
    closes b's session of 2; the next run's (b, 8000) is behind that watermark: it reaches the
    function, which drops it (its session closed), as in Flink."""

    def run(checkpoint_id: int, rows: list[tuple[str, int, int]], **options: Any) -> Any:
        return keyed_process(
            spark.createDataFrame(rows, "key string, n long, ts long"), key="key",
            function=SessionTimeout(), output_schema=KEY_COUNT, job="late_sessions",
            checkpoint_id=checkpoint_id, parallelism=1, event_time="ts",
            allowed_lateness=timedelta(seconds=1), **options,
        )  # fmt: skip

    first = run(1, [("b", 1, 2000), ("b", 2, 4000), ("c", 1, 10500)])
    assert _rows(first) == [("b", 2)] and first.watermark == 9500
    last = run(2, [("b", 3, 8000), ("a", 1, 12_000)], end_of_input=True)
    assert last.late_rows == 1
    assert _rows(last) == [("c", 1), ("a", 1)]  # (b, 8000) opened no session


def test_pyflink_count_with_ttl_on_spark_expires_on_the_runs_clock(
    spark: Any, statecore_home: StatecoreConfig
) -> None:
    def run(checkpoint_id: int, now: int, rows: list[tuple[str, str]]) -> list[Any]:
        result = keyed_process(
            spark.createDataFrame(rows, "key string, v string"), key="key",
            function=CountWithTtl(), output_schema=KEY_COUNT, job="ttl_counts",
            checkpoint_id=checkpoint_id, parallelism=1, order_by=["v"],
            processing_time=ManualTimeProvider(T0 + now),
        )  # fmt: skip
        return _rows(result)

    assert run(1, 0, [("a", "x")]) == [("a", 1)]
    assert sorted(run(2, 6_000, [("a", "y"), ("b", "z")])) == [("a", 2), ("b", 1)]
    assert run(3, 15_999, [("a", "w")]) == [("a", 3)]  # written at 6000: alive until 16000
    assert run(4, 16_000, [("b", "v")]) == [("b", 1)]  # b written at 6000: expired


def test_pyflink_map_state_deduplication_on_spark(
    spark: Any, statecore_home: StatecoreConfig
) -> None:
    schema = T.StructType(
        [
            T.StructField("user", T.StringType()),
            T.StructField("event", T.StringType()),
            T.StructField("seq", T.LongType()),
        ]
    )
    events = [("u1", "e1", 1), ("u1", "e2", 2), ("u1", "e1", 3), ("u2", "e1", 4), ("u2", "e1", 5)]
    run = keyed_process(
        spark.createDataFrame(events, schema), key="user", function=Deduplicate(),
        output_schema=schema, job="dedup", checkpoint_id=1, parallelism=1, order_by=["seq"],
        processing_time=ManualTimeProvider(T0),
    )  # fmt: skip
    assert sorted(_rows(run)) == [("u1", "e1", 1), ("u1", "e2", 2), ("u2", "e1", 4)]
