"""Watching a streaming query from outside (statecore.ops.streams), without Spark: the driver's
status file and stop marker, a silent driver detected as STALE, a FAILED one reported with its
error, and the lag read from a file source log in Spark's format (compacted every 10 batches);
a Kafka query's source log (its starting offsets) names no file.
The end-to-end version, against a real query, is tests/airflow/test_streaming.py."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.ops.streams import (
    FAILED,
    RUNNING,
    STALE,
    STREAM_METADATA,
    StreamStatus,
    checkpoints_after,
    clear_stop,
    read_status,
    request_stop,
    stop_requested,
    stream_progress,
    write_status,
)
from tests.inprocess import run_checkpoint
from tests.runtime.test_task import Counting


def _source_log(location: Path, batch: str, files: list[Path]) -> None:
    folder = location / "sources" / "0"
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["v1"] + [
        json.dumps({"path": f"file://{f}", "timestamp": 0, "batchId": int(batch.split(".")[0])})
        for f in files
    ]
    (folder / batch).write_text("\n".join(lines))
    for log in ("offsets", "commits"):
        (location / log).mkdir(exist_ok=True)
        (location / log / batch.split(".")[0]).write_text("v1")


def test_status_stop_marker_and_lag(statecore_home: StatecoreConfig, tmp_path: Path) -> None:
    location = tmp_path / "checkpoint"
    inputs = tmp_path / "input"
    files = []
    for day in range(13):
        folder = inputs / f"date=2026-01-{day + 1:02d}"
        folder.mkdir(parents=True)
        (folder / "events.parquet").write_bytes(b"x")
        files.append(folder / "events.parquet")
    (inputs / "_SUCCESS").write_text("")  # hidden files are not input
    for batch in range(9):
        _source_log(location, str(batch), [files[batch]])
    _source_log(location, "9.compact", files[:10])  # batches 0-9
    _source_log(location, "10", [files[10]])
    run_checkpoint(statecore_home, Counting(), [("a", 1)], job="s", checkpoint_id=10)

    write_status(str(location), StreamStatus(job="s", state=RUNNING, input_path=str(inputs)))
    assert read_status(str(location)).state == RUNNING  # type: ignore[union-attr]
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        progress = stream_progress(catalog, job="s", checkpoint_location=str(location))
        assert progress.state == RUNNING and not progress.failed
        assert (progress.planned_batch, progress.committed_batch) == (10, 10)
        assert progress.processed_files == 11
        assert progress.pending_files == tuple(str(f) for f in files[11:])
        assert progress.last_checkpoint == 10
        assert checkpoints_after(catalog, "s", None) == [10]
        assert checkpoints_after(catalog, "s", 10) == []

        # a driver that stopped writing its status is dead
        write_status(
            str(location), StreamStatus(job="s", state=RUNNING, updated_at=time.time() - 120)
        )
        assert stream_progress(catalog, job="s", checkpoint_location=str(location)).state == STALE
        write_status(str(location), StreamStatus(job="s", state=FAILED, error="boom"))
        failed = stream_progress(catalog, job="s", checkpoint_location=str(location))
        assert failed.failed and failed.error == "boom"

    assert not stop_requested(str(location))
    request_stop(str(location))
    assert stop_requested(str(location))
    clear_stop(str(location))
    assert not stop_requested(str(location))


def test_progress_of_a_kafka_query_counts_no_files(
    statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    """Spark's Kafka source logs its starting offsets in ``sources/0/0`` (a NUL byte, ``v1``,
    then the offsets as JSON), not input files: the progress reads its batches and no files."""
    location = tmp_path / "checkpoint"
    (location / "sources" / "0").mkdir(parents=True)
    (location / "sources" / "0" / "0").write_bytes(b'\x00v1\n{"clicks":{"0":0,"1":0,"2":0}}')
    for log in ("offsets", "commits"):
        (location / log).mkdir()
        (location / log / "0").write_text("v1")
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        progress = stream_progress(catalog, job="k", checkpoint_location=str(location))
    assert (progress.planned_batch, progress.committed_batch) == (0, 0)
    assert progress.processed_files == 0 and progress.pending_files == ()


def test_a_stream_job_whose_query_fails_to_start_is_failed_not_stale(tmp_path: Path) -> None:
    """``jobs/clickstream_stream.run`` (the file and Kafka jobs' run): a start that raises, e.g.
    a bad argument refused by ``keyed_stream``, leaves the status FAILED with the error, and a
    stop marker of an earlier run is cleared."""
    from jobs.clickstream_stream import run
    from statecore.errors import ConfigError

    location = str(tmp_path / "offsets")
    request_stop(location)

    def refused() -> Any:
        raise ConfigError("keyed_stream: parallelism 0? At least 1")

    with pytest.raises(ConfigError, match="parallelism 0"):
        run(object(), refused, checkpoint_location=location, job="j", input_path="/in")  # type: ignore[arg-type]
    status = read_status(location)
    assert status is not None and status.state == FAILED and status.input_path == "/in"
    assert status.error == "keyed_stream: parallelism 0? At least 1"
    assert not stop_requested(location)


def test_own_query_a_location_another_query_owns_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """A stream job's run refuses a location that holds another job's stream, whose queries
    another DAG starts, or where another query runs now (fresh RUNNING status, its driver
    alive), before it writes there: the other query's status and stop marker stay as they were.
    A location whose query died (its driver gone, or silent) is taken over."""
    import os

    from jobs.clickstream_stream import run
    from statecore.errors import ConfigError

    started: list[str] = []

    def start() -> Any:
        started.append("query")
        raise ConfigError("not started in this test")

    other_job = tmp_path / "other-job"
    other_job.mkdir()
    (other_job / STREAM_METADATA).write_text(json.dumps({"job": "clickstream_stream"}))
    theirs = StreamStatus(job="clickstream_stream", state="FINISHED", run_id="streaming_pipeline/1")
    write_status(str(other_job), theirs)
    with pytest.raises(ConfigError, match="belongs to the stream of job 'clickstream_stream'"):
        run(object(), start, checkpoint_location=str(other_job), job="clickstream_query")  # type: ignore[arg-type]
    assert read_status(str(other_job)) == theirs

    busy = str(tmp_path / "busy")  # the same job, a query running there now (this process)
    live = StreamStatus(job="j", state=RUNNING, pid=os.getpid(), query_id="q1", run_id="r1")
    write_status(busy, live)
    request_stop(busy)  # a stop asked of the running query stays for it
    with pytest.raises(ConfigError, match="is in use: a query of job 'j' runs there"):
        run(object(), start, checkpoint_location=busy, job="j", run_id="r2")  # type: ignore[arg-type]
    assert read_status(busy) == live and stop_requested(busy)
    assert started == []

    # the same job's location, its queries started by another DAG: refused whatever its state
    pipeline = dataclasses.replace(theirs, job="j", run_id="streaming_pipeline/scheduled__1")
    write_status(busy, pipeline)
    with pytest.raises(ConfigError, match="that the DAG 'streaming_pipeline' runs"):
        run(object(), start, checkpoint_location=busy, job="j", run_id="streaming_query/m1")  # type: ignore[arg-type]
    assert read_status(busy) == pipeline and started == []
    again = "streaming_pipeline/scheduled__2"  # the same DAG's next run takes it
    with pytest.raises(ConfigError, match="not started in this test"):
        run(object(), start, checkpoint_location=busy, job="j", run_id=again)  # type: ignore[arg-type]
    assert started == ["query"]
    started.clear()

    silent = dataclasses.replace(live, updated_at=time.time() - 3600)  # its driver went silent
    gone = dataclasses.replace(live, pid=2**22 + 12345)  # no such process on this host
    for status in (silent, gone):
        write_status(busy, status)
        with pytest.raises(ConfigError, match="not started in this test"):
            run(object(), start, checkpoint_location=busy, job="j", run_id="r2")  # type: ignore[arg-type]
        assert read_status(busy).run_id == "r2"  # type: ignore[union-attr]
    assert started == ["query", "query"]
