"""Run DAGs with ``dag.test()`` on a real Airflow (SQLite) in a subprocess of their own.

One interpreter runs a list of steps ``(dag_id, conf)`` in order, each as a ``dag.test()`` with
its own logical date, and prints one JSON line per step: the run's state, each task's state and
each task's XCom. It stops at the first run that fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from statecore.cli.demo import airflow_environment

REPO = Path(__file__).resolve().parents[2]

DRIVER = """
import importlib, json, os, sys
import pendulum
from airflow.dag_processing.dagbag import DagBag
from airflow.models.xcom import XComModel
from airflow.utils.db import initdb
from airflow.utils.session import create_session

initdb()
if os.environ.get("STATECORE_TEST_LISTENER"):  # an Airflow listener of the test's own
    from airflow.sdk.listener import get_listener_manager
    get_listener_manager().add_listener(importlib.import_module(os.environ["STATECORE_TEST_LISTENER"]))
base = pendulum.datetime(2026, 2, 1, tz="UTC").add(minutes=int(sys.argv[3]))
for i, (dag_id, conf) in enumerate(json.loads(sys.argv[2])):
    bag = DagBag(dag_folder=sys.argv[1])  # afresh: dag.test() keeps a run's conf in its params
    assert not bag.import_errors, bag.import_errors
    run = bag.get_dag(dag_id).test(logical_date=base.add(minutes=i), run_conf=conf)
    tasks, xcoms = {}, {}
    with create_session() as session:
        for ti in run.get_task_instances(session=session):
            tasks[ti.task_id] = str(ti.state)
            row = session.scalars(XComModel.get_many(run_id=run.run_id, key="return_value",
                                                     task_ids=ti.task_id, dag_ids=dag_id)).first()
            xcoms[ti.task_id] = None if row is None else XComModel.deserialize_value(row)
    print("STEP " + json.dumps({"dag": dag_id, "state": str(run.state), "tasks": tasks,
                                "xcom": xcoms}, default=str), flush=True)
    if str(run.state) != "success":
        break
"""


def run_dags(
    home: Path,
    steps: list[tuple[str, dict[str, Any]]],
    *,
    timeout: float = 1500,
    first_minute: int = 0,
    allow_failure: bool = False,
    airflow_home: Path | None = None,
    listener: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Run ``steps`` with STATECORE_HOME ``home``; the result of each step (the runs' output is
    kept in ``home/dag-runs.log``). Step ``i``'s logical date is 2026-02-01 plus
    ``first_minute + i`` minutes (a later call continues with a larger ``first_minute``). A run
    that fails stops the steps; with ``allow_failure`` its result is returned, else it fails.
    ``airflow_home``: an Airflow database of its own (default ``home/airflow``), for runs beside
    another call's on the same statecore home. ``listener``: a module of Airflow listener hooks
    (``on_task_instance_success`` ...) registered in the runs' interpreter, which runs the tasks;
    ``extra_env``: more environment for it."""
    env = airflow_environment(REPO, home)
    if airflow_home is not None:
        env["AIRFLOW_HOME"] = str(airflow_home)
    if listener is not None:
        env["STATECORE_TEST_LISTENER"] = listener
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.update(extra_env or {})
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(REPO / "dags"), json.dumps(steps), str(first_minute)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    with (home / "dag-runs.log").open("a") as log:
        log.write(done.stdout + done.stderr)
    results = [
        json.loads(line[5:]) for line in done.stdout.splitlines() if line.startswith("STEP ")
    ]
    failed = (
        done.returncode != 0
        or len(results) != len(steps)
        or any(r["state"] != "success" for r in results)
    )
    if allow_failure and results and results[-1]["state"] == "failed":
        return results
    assert not failed, (results, done.stdout[-4000:], done.stderr[-6000:])
    return results


@dataclass
class StartedAirflow:
    """A ``dag.test()`` driver past Airflow's migration and the API server started beside it
    (what the UI tests' fixtures start): the driver's output lines so far, and the server's log
    file (close it after stopping the server)."""

    driver: subprocess.Popen[str]
    lines: list[str]
    server: subprocess.Popen[bytes]
    log: IO[bytes]


def start_driver_and_api_server(
    env: dict[str, str],
    tmp: Path,
    port: int,
    driver: str,
    dags: Path,
    while_migrating: Callable[[], None],
) -> StartedAirflow:
    """Start ``driver`` (Python code, its argument ``dags``) and, once it printed ``MIGRATED``,
    ``airflow api-server`` on ``port``; ``while_migrating`` runs meanwhile. Logs go to
    ``tmp/dag-test.log`` and ``tmp/api-server.log``."""
    process = subprocess.Popen(
        [sys.executable, "-c", driver, str(dags)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=(tmp / "dag-test.log").open("wb"),
        text=True,
    )
    while_migrating()
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("MIGRATED"):
            break
    log = (tmp / "api-server.log").open("wb")
    server = subprocess.Popen(
        ["airflow", "api-server", "--port", str(port), "--host", "127.0.0.1"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return StartedAirflow(process, lines, server, log)
