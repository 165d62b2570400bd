"""``StreamSensor.poke`` on the status files a streaming driver leaves (no Spark): a sensor that
watches the query its own DAG run starts (``query_of_this_run``, as ``streaming_query``'s
``watch``) waits while the status is an earlier query's, and one that watches any query fails
on a FAILED status at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from statecore.cli.demo import airflow_environment
from tests.airflow.dagrun import REPO

pytestmark = pytest.mark.airflow

POKE = """
import json, sys, time
from datetime import datetime, timezone
from types import SimpleNamespace

sys.path.insert(0, sys.argv[1])
from airflow.sdk.exceptions import AirflowException
from statecore.ops.streams import StreamStatus, write_status
from statecore_airflow import StreamSensor

location = sys.argv[2]
run = SimpleNamespace(start_date=datetime.now(timezone.utc))
context = {"dag_run": run}
results = []


def poke(state, *, written, this_run):
    write_status(location, StreamStatus(job="clicks", state=state, error="boom",
                                        updated_at=written))
    sensor = StreamSensor(task_id="watch", job="clicks", checkpoint_location=location,
                          wait_for="end", query_of_this_run=this_run)
    try:
        done = sensor.poke(context)
        results.append([state, this_run, done.is_done, done.xcom_value["state"]])
    except AirflowException as exc:
        results.append([state, this_run, "failed", str(exc)])


before, after = run.start_date.timestamp() - 600, time.time() + 1
for state in ("FAILED", "FINISHED", "STOPPED"):
    poke(state, written=before, this_run=True)
poke("FAILED", written=before, this_run=False)
poke("RUNNING", written=after, this_run=True)
poke("FINISHED", written=after, this_run=True)
poke("FAILED", written=after, this_run=True)
print(json.dumps(results))
"""


def test_stream_sensor_of_this_runs_query_waits_past_an_earlier_querys_status(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", POKE, str(REPO / "plugins"), str(tmp_path / "offsets")],
        env=airflow_environment(REPO, tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results[:3] == [  # an earlier query's end: this run's query has not written yet
        ["FAILED", True, False, "NOT_STARTED"],
        ["FINISHED", True, False, "NOT_STARTED"],
        ["STOPPED", True, False, "NOT_STARTED"],
    ]
    state, this_run, outcome, message = results[3]  # watching any query: FAILED fails at once
    assert (state, this_run, outcome) == ("FAILED", False, "failed") and "boom" in message
    assert results[4:6] == [
        ["RUNNING", True, False, "RUNNING"],
        ["FINISHED", True, True, "FINISHED"],
    ]
    state, _, outcome, message = results[6]
    assert (state, outcome) == ("FAILED", "failed") and "boom" in message
