"""The streaming DAGs on one home, on a real Airflow (SQLite) and real Spark queries
(spark-submit): ``streaming_pipeline`` runs three consecutive availableNow increments, each
publishing exactly the checkpoints it completed (the third once failed with a TypeError: the
previous result was read from XCom across runs), a file landing during the second's increment
read by the third, and a fourth with no new file skipped before Spark starts; then
``streaming_query`` runs a continuous query on the same home — a job and a location of its own,
where it once failed on ``streaming_pipeline``'s Spark checkpoint — and ``streaming_query_stop``
(on an Airflow database of its own, as another worker's) waits until it caught up with a file
that arrived while it ran and stops it; the query's ``watch`` then ends on its own query's
status."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from statecore.catalog import Catalog, CheckpointStatus
from statecore.cli.demo import generate_clickstream
from statecore.config import StatecoreConfig
from statecore.ops.streams import FINISHED, STOPPED, read_status
from tests.airflow.dagrun import run_dags

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(2400)]

JOB, QUERY_JOB = "clickstream_stream", "clickstream_query"
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


def _output_rows(home: Path, job: str) -> int:
    return int(DeltaTable(str(home / "output" / job)).to_pyarrow_table().num_rows)


def _wait(
    predicate: Callable[[], bool], timeout: float, what: str, alive: Callable[[], bool]
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        assert alive(), f"the run ended before {what}"
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def _land_after_query(home: Path, *, day: int) -> threading.Thread:
    """A thread that writes day ``day``'s input file once a new query of
    ``streaming_pipeline`` finished (it took its input: the file is the next run's)."""
    location = str(home / "streaming" / JOB)
    before = read_status(location)

    def land() -> None:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            status = read_status(location)
            if status is not None and status.state == FINISHED and status != before:
                _data(home, days=1, start_day=day)
                return
            time.sleep(0.2)

    thread = threading.Thread(target=land, daemon=True)
    thread.start()
    return thread


def test_own_query_streaming_dags_on_one_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _data(home, days=2)
    conf = {"parallelism": 2, "max_files_per_trigger": 1}
    published = []
    # three scheduled-like runs: a file before the second, and one landing during the second's
    # increment, once its query took its input; the third reads that one
    for i, new_days in enumerate((0, 1, 0)):
        if new_days:
            _data(home, days=new_days, start_day=2 + i)
        landing = _land_after_query(home, day=4) if i == 1 else None
        [run] = run_dags(home, [("streaming_pipeline", conf)], first_minute=i)
        if landing is not None:
            landing.join(timeout=60)
            assert not landing.is_alive(), "the file did not land during the increment"
        assert run["tasks"] == dict.fromkeys(("check", "increment", "checkpoints"), "success")
        progress = run["xcom"]["checkpoints"]
        assert progress["state"] == FINISHED
        assert i == 1 or progress["lag_files"] == 0  # the second's: the landed file, perhaps
        assert progress["run_id"].startswith("streaming_pipeline/")  # this run's query's status
        published.append(progress["completed"])
    assert published == [[0, 1], [2], [3]]  # one micro-batch per file, each run its own
    assert _output_rows(home, JOB) == 4 * EVENTS  # exactly once

    # a fourth run with no new file: skipped before Spark starts, the reason in its log
    [idle] = run_dags(home, [("streaming_pipeline", conf)], first_minute=3)
    assert idle["tasks"] == dict.fromkeys(("check", "increment", "checkpoints"), "skipped")
    assert "no new input since run streaming_pipeline/" in (home / "dag-runs.log").read_text()
    config = StatecoreConfig.resolve(home=str(home), env={})
    with Catalog.connect(config.catalog_url) as catalog:
        latest = catalog.latest_checkpoint(JOB)
        assert latest is not None and latest.checkpoint_id == 3 and latest.parallelism == 2
    pipeline_status = read_status(str(home / "streaming" / JOB))

    # the continuous query beside it: its own job and location
    location = home / "streaming" / QUERY_JOB
    results: dict[str, Any] = {}

    def query_run() -> None:
        conf = {"trigger_interval": "2s", "parallelism": 2}
        [results["query"]] = run_dags(home, [("streaming_query", conf)], first_minute=10)

    runner = threading.Thread(target=query_run, daemon=True)
    runner.start()

    def first_checkpoint() -> bool:
        status = read_status(str(location))
        return status is not None and status.batch_id is not None

    _wait(first_checkpoint, 600, "the query's first micro-batch", runner.is_alive)
    status = read_status(str(location))
    assert status is not None and (status.run_id or "").startswith("streaming_query/")
    _data(home, days=1, start_day=5)  # arrives while it runs: the stop DAG waits for it
    [stop] = run_dags(
        home,
        [("streaming_query_stop", {"timeout_seconds": 300})],
        first_minute=20,
        airflow_home=tmp_path / "airflow-stop",
    )
    assert stop["tasks"] == {"drain": "success", "caught_up": "success", "stop": "success"}
    caught_up = stop["xcom"]["caught_up"]
    assert caught_up["lag_files"] == 0 and caught_up["processed_files"] == 5
    assert caught_up["last_checkpoint"] <= caught_up["committed_batch"]  # ticks make none
    assert stop["xcom"]["stop"]["state"] == STOPPED
    runner.join(timeout=600)
    query = results["query"]
    assert query["tasks"] == {"query": "success", "watch": "success"}
    watch = query["xcom"]["watch"]
    assert watch["state"] == STOPPED and watch["run_id"] == status.run_id
    assert read_status(str(home / "streaming" / JOB)) == pipeline_status  # untouched
    with Catalog.connect(config.catalog_url) as catalog:
        done = catalog.list_checkpoints(QUERY_JOB, status=CheckpointStatus.COMPLETED)
        assert done and not catalog.list_checkpoints(QUERY_JOB, status=CheckpointStatus.IN_PROGRESS)
    assert _output_rows(home, QUERY_JOB) == 5 * EVENTS
    assert _output_rows(home, JOB) == 4 * EVENTS
