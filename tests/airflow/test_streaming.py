"""The streaming DAGs on a real Airflow (SQLite) and a real Spark query (spark-submit):
``streaming_pipeline`` runs availableNow increments, and ``streaming_query_stop`` watches a
continuous query until it caught up with a file that arrived while it ran, then stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from statecore.catalog import Catalog, CheckpointStatus
from statecore.cli.demo import airflow_environment, generate_clickstream
from statecore.config import StatecoreConfig
from statecore.ops.streams import STOPPED, read_status
from tests.airflow.dagrun import REPO, run_dags

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

JOB = "clickstream_stream"
EVENTS = 60


def _data(home: Path, days: int, start_day: int = 1) -> list[Path]:
    from datetime import date

    return generate_clickstream(
        home / "data" / "clickstream",
        start=date(2026, 1, start_day),
        days=days,
        users=12,
        events_per_day=EVENTS,
        seed=start_day,
    )


def _output_rows(home: Path) -> int:
    return int(DeltaTable(str(home / "output" / JOB)).to_pyarrow_table().num_rows)


def test_streaming_pipeline_runs_available_now_increments(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _data(home, days=2)
    conf = {"parallelism": 2, "max_files_per_trigger": 1}
    [first] = run_dags(home, [("streaming_pipeline", conf)])
    assert first["tasks"] == {"check": "success", "increment": "success", "checkpoints": "success"}
    assert first["xcom"]["checkpoints"]["completed"] == [0, 1]  # one micro-batch per file
    assert first["xcom"]["checkpoints"]["state"] == "FINISHED"
    assert _output_rows(home) == 2 * EVENTS

    _data(home, days=1, start_day=3)  # a file arrives; the next increment takes only it
    [second] = run_dags(home, [("streaming_pipeline", conf)], first_minute=1)
    progress = second["xcom"]["checkpoints"]
    assert progress["completed"] == [2]
    assert progress["processed_files"] == 3 and progress["lag_files"] == 0
    assert _output_rows(home) == 3 * EVENTS  # exactly once
    config = StatecoreConfig.resolve(home=str(home), env={})
    with Catalog.connect(config.catalog_url) as catalog:
        latest = catalog.latest_checkpoint(JOB)
        assert latest is not None and latest.checkpoint_id == 2
        assert latest.parallelism == 2


def _wait(
    predicate: Callable[[], bool], timeout: float, what: str, process: subprocess.Popen[str]
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        assert process.poll() is None, f"the query exited ({process.returncode}) before {what}"
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def test_watch_and_stop_a_running_query(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _data(home, days=1)
    env = airflow_environment(REPO, home)
    location = home / "streaming" / JOB
    log = (tmp_path / "query.log").open("w")
    query = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "jobs" / "clickstream_stream.py"),
            "--trigger-interval",
            "2s",
            "--parallelism",
            "2",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    config = StatecoreConfig.resolve(home=str(home), env={})
    try:

        def first_checkpoint() -> bool:
            status = read_status(str(location))
            return status is not None and status.batch_id is not None

        _wait(first_checkpoint, 400, "the first micro-batch", query)
        _data(home, days=1, start_day=2)  # arrives while it runs: the sensor waits for it
        [stop] = run_dags(home, [("streaming_query_stop", {"timeout_seconds": 300})])
        assert stop["tasks"] == {"drain": "success", "caught_up": "success", "stop": "success"}
        caught_up = stop["xcom"]["caught_up"]
        assert caught_up["lag_files"] == 0 and caught_up["processed_files"] == 2
        # micro-batches of ticks only (no records, no timer due) make no checkpoint
        assert caught_up["last_checkpoint"] <= caught_up["committed_batch"]
        assert stop["xcom"]["stop"]["state"] == STOPPED
        assert query.wait(timeout=300) == 0
    finally:
        if query.poll() is None:
            os.killpg(query.pid, signal.SIGKILL)
        log.close()
    with Catalog.connect(config.catalog_url) as catalog:
        done = catalog.list_checkpoints(JOB, status=CheckpointStatus.COMPLETED)
        assert done and not catalog.list_checkpoints(JOB, status=CheckpointStatus.IN_PROGRESS)
    assert _output_rows(home) == 2 * EVENTS
