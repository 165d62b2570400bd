"""Warm state hosts (:mod:`statecore.spark.host`) on the shared ``local[2]`` session: a
stream's task runs its subtask in the subtask's host, so every task after the first continues
warm whichever Python worker Spark picked (in a worker, 52-74 % did); a host killed between
micro-batches costs a restore, never state; an error in the function fails the query as itself.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import types as T

from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.spark import keyed_stream
from statecore.spark.host import host_name
from statecore.spark.host_stop import stop_marker_uri, stopped_at

from .test_stream import completed, spec, totals, write_file

pytestmark = pytest.mark.spark

OUTPUT = T.StructType([T.StructField("user", T.StringType()), T.StructField("total", T.LongType())])
USERS = 40


class Totals(KeyedProcessFunction):
    """The running total of ``amount`` per user; ``amount`` 13 raises (a bad record)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        if value.amount == 13:
            raise ValueError(f"bad amount 13 for {ctx.current_key}")
        self.total.update(self.total.value() + value.amount)
        yield ctx.current_key, self.total.value()


def start(spark: Any, s: dict[str, Any], trigger: dict[str, Any]) -> Any:
    """The query of the input's files, one micro-batch each, at parallelism 2."""
    stream = spark.readStream.schema("user string, ts long, amount long")
    return keyed_stream(
        stream.option("maxFilesPerTrigger", 1).json(s["input"]),
        key="user",
        function=Totals(),
        output_schema=OUTPUT,
        job=s["job"],
        checkpoint_location=s["checkpoint_location"],
        output_table=s["output_table"],
        parallelism=2,
        trigger=trigger,
    )


def run(spark: Any, s: dict[str, Any]) -> None:
    """Every file of the input, one micro-batch each, at parallelism 2."""
    start(spark, s, {"availableNow": True}).awaitTermination()


def write_batches(folder: Path, first: int, count: int) -> None:
    for i in range(first, first + count):
        write_file(folder, f"f{i:03d}", [(f"u{k}", i, i + 1) for k in range(USERS)])


def host_pids(job: str) -> list[int]:
    """The processes serving ``job``'s hosts (their command line names their socket)."""
    sockets = {host_name(job, "main", i) for i in range(2)}
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "statecore.spark.host" in cmdline and any(s in cmdline for s in sockets):
            pids.append(int(entry.name))
    return pids


def test_warm_host_every_task_after_the_first_continues_warm_and_a_killed_host_restores(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    s = spec(tmp_path, job="hosted")
    inp = Path(s["input"])
    write_batches(inp, 0, 6)
    query = start(spark, s, {"processingTime": "100 milliseconds"})
    try:
        query.processAllAvailable()
        runs = completed(statecore_home, "hosted")
        assert runs[0].metrics["warm_tasks"] == 0
        assert all(c.metrics["warm_tasks"] == c.metrics["tasks"] for c in runs[1:])
        assert all(len(c.metrics["acquire_ms"]) == c.metrics["tasks"] for c in runs)
        for c in runs:  # the CPU time of the acquiring threads: a part of the time it took
            for wall, cpu in zip(c.metrics["acquire_ms"], c.metrics["acquire_cpu_ms"], strict=True):
                assert 0 < cpu <= wall + 0.1, c.metrics
        pids = host_pids("hosted")
        assert len(pids) == 2, pids
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        killed_after = runs[-1].checkpoint_id
        write_batches(inp, 6, 3)  # the next tasks start new hosts
        query.processAllAvailable()
    finally:
        query.stop()
    after = [
        c
        for c in completed(statecore_home, "hosted")
        if c.checkpoint_id > killed_after and c.metrics["tasks"]
    ]
    assert [(c.metrics["warm_tasks"], c.metrics["tasks"]) for c in after[:1]] == [(0, 2)]
    assert all(c.metrics["warm_tasks"] == c.metrics["tasks"] for c in after[1:])
    assert totals(statecore_home, "hosted") == {f"u{k}": sum(range(1, 10)) for k in range(USERS)}


def test_warm_host_hosts_exit_when_their_query_stops(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    """A stopped query's hosts do not hold its state (and RocksDB's files) for half an hour:
    those on the driver's machine are asked to exit when it terminates, and it leaves the stop
    marker with its last checkpoint for those on other machines."""
    s = spec(tmp_path, job="hosted_stop")
    write_batches(Path(s["input"]), 0, 2)
    query = start(spark, s, {"processingTime": "100 milliseconds"})
    try:
        query.processAllAvailable()
        assert len(host_pids("hosted_stop")) == 2
    finally:
        query.stop()
    deadline = time.monotonic() + 20
    while host_pids("hosted_stop") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert host_pids("hosted_stop") == []
    last = max(c.checkpoint_id for c in completed(statecore_home, "hosted_stop"))
    assert stopped_at(stop_marker_uri(statecore_home.warehouse, "hosted_stop", "main")) == last


def test_warm_host_an_error_in_the_function_fails_the_query_as_itself(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    s = spec(tmp_path, job="hosted_error")
    inp = Path(s["input"])
    write_batches(inp, 0, 1)
    run(spark, s)
    write_file(inp, "f001", [("u1", 1, 13)])
    with pytest.raises(Exception, match="ValueError: bad amount 13 for u1"):
        run(spark, s)
    assert [c.checkpoint_id for c in completed(statecore_home, "hosted_error")] == [0]
    assert totals(statecore_home, "hosted_error") == {f"u{k}": 1 for k in range(USERS)}


def test_warm_host_streams_take_the_input_files_in_the_order_they_were_written(
    tmp_path: Path,
) -> None:
    """The running totals these tests expect need Spark's file source to take ``f000``,
    ``f001``, ... in that order: it orders by modification time in milliseconds, the folder's
    listing order deciding ties (the broadcast test once saw ``f001`` first, totals 2, 3, 6)."""
    folder = tmp_path / "in"
    write_batches(folder, 0, 30)
    modified_ms = [f.stat().st_mtime_ns // 1_000_000 for f in sorted(folder.iterdir())]
    assert all(a < b for a, b in zip(modified_ms, modified_ms[1:])), modified_ms
