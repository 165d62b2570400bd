"""``StreamSensor.poke`` on the status files a streaming driver leaves (no Spark).

A sensor that watches the query its own DAG run starts (``query_of_this_run``, as
``streaming_query``'s ``watch``) takes only a status that names its run (the driver keeps the
``--run-id`` its DAG passed, ``<dag_id>/<run_id>``): another run's status, whatever its age,
reads as NOT_STARTED. Once ``streaming_query``'s watch reported success by reading the FINISHED
status another DAG's query wrote in a shared folder. One that watches any query fails on a
FAILED status at once, and one that waits for a query to catch up is done as soon as the query
ended: ``streaming_query_stop`` once waited 370 s in ``caught_up`` on a query that had ended."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from statecore.cli.demo import airflow_environment
from tests.airflow.dagrun import REPO

pytestmark = pytest.mark.airflow

POKE = """
import json, sys, time
from types import SimpleNamespace

sys.path.insert(0, sys.argv[1])
from airflow.sdk.exceptions import AirflowException
from statecore.ops.streams import StreamStatus, write_status
from statecore_airflow import StreamSensor

location = sys.argv[2]
context = {"dag": SimpleNamespace(dag_id="streaming_query"), "run_id": "manual__2"}
THIS_RUN, OTHER_RUN = "streaming_query/manual__2", "streaming_pipeline/scheduled__1"
results = []


def poke(state, *, run_id, this_run, wait_for="end"):
    write_status(location, StreamStatus(job="clicks", state=state, error="boom", run_id=run_id,
                                        query_id="q-" + str(run_id)))
    sensor = StreamSensor(task_id="watch", job="clicks", checkpoint_location=location,
                          wait_for=wait_for, query_of_this_run=this_run)
    try:
        done = sensor.poke(context)
        results.append([state, this_run, done.is_done, done.xcom_value["state"],
                        done.xcom_value["run_id"]])
    except AirflowException as exc:
        results.append([state, this_run, "failed", str(exc)])


for state in ("FAILED", "FINISHED", "STOPPED", "RUNNING"):  # written just now, by another run
    poke(state, run_id=OTHER_RUN, this_run=True)
poke("FINISHED", run_id=None, this_run=True)  # a query started by hand names no run
poke("FAILED", run_id=OTHER_RUN, this_run=False)
poke("RUNNING", run_id=THIS_RUN, this_run=True)
poke("FINISHED", run_id=THIS_RUN, this_run=True)
poke("FAILED", run_id=THIS_RUN, this_run=True)
for state in ("STOPPED", "FINISHED", "RUNNING"):  # caught_up, of whatever query runs there
    poke(state, run_id=OTHER_RUN, this_run=False, wait_for="caught_up")
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def pokes(tmp_path_factory: pytest.TempPathFactory) -> list[list[Any]]:
    tmp = tmp_path_factory.mktemp("pokes")
    done = subprocess.run(
        [sys.executable, "-c", POKE, str(REPO / "plugins"), str(tmp / "offsets")],
        env=airflow_environment(REPO, tmp / "home"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_own_query_sensor_takes_only_the_status_of_its_runs_query(pokes: list[list[Any]]) -> None:
    assert pokes[:5] == [  # another run's status, fresh or not: this run's query has not written
        ["FAILED", True, False, "NOT_STARTED", None],
        ["FINISHED", True, False, "NOT_STARTED", None],
        ["STOPPED", True, False, "NOT_STARTED", None],
        ["RUNNING", True, False, "NOT_STARTED", None],
        ["FINISHED", True, False, "NOT_STARTED", None],
    ]
    state, this_run, outcome, message = pokes[5]  # watching any query: FAILED fails at once
    assert (state, this_run, outcome) == ("FAILED", False, "failed") and "boom" in message
    mine = "streaming_query/manual__2"
    assert pokes[6:8] == [
        ["RUNNING", True, False, "RUNNING", mine],
        ["FINISHED", True, True, "FINISHED", mine],
    ]
    state, _, outcome, message = pokes[8]
    assert (state, outcome) == ("FAILED", "failed") and "boom" in message


def test_own_query_caught_up_is_done_once_the_query_ended(pokes: list[list[Any]]) -> None:
    other = "streaming_pipeline/scheduled__1"
    assert pokes[9:] == [
        ["STOPPED", False, True, "STOPPED", other],
        ["FINISHED", False, True, "FINISHED", other],
        ["RUNNING", False, False, "RUNNING", other],  # running, its planned batch not committed
    ]
