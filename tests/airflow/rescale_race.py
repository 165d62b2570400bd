"""An Airflow listener for races between a DAG's tasks: something of the job happens between
one task and the next (by default the rescale DAG's savepoint and rescale tasks).

Registered in the interpreter that runs the DAG (``run_dags(listener=...)``); when the task
``STATECORE_TEST_HOLD_AFTER`` (``dag_id.task_id``, default ``rescale.savepoint``) succeeds,
before Airflow starts the next task, it
- runs the Spark steps in ``STATECORE_TEST_BETWEEN_STEPS``, if set
  (:func:`tests.airflow.ops_jobs.run_steps`, a real run of the job in a Spark of its own;
  ``test_rescale_race.py``);
- takes the lease of the job ``STATECORE_TEST_HOLD_JOB``, if set and the catalog has the job,
  as a run does (a real lease in the home's catalog; as the operation
  ``STATECORE_TEST_HOLD_AS``, default ``run 99``: e.g. ``ttl-cleanup`` holds it as maintenance
  does), and releases it ``STATECORE_TEST_HOLD_SECONDS`` later from a thread of its own, while
  Airflow goes on to the next task (``test_lease_wait.py``, ``test_day_order_dag.py``); with
  ``STATECORE_TEST_HOLD_UNTIL_LOG`` (a folder of task logs), as soon as one of them says a
  writer "waits up to" ... for the lease, if sooner.
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pluggy

from statecore.catalog import Catalog
from statecore.checkpoint.lock import hold_lease
from statecore.config import StatecoreConfig
from tests.airflow.ops_jobs import run_steps

STEPS_ENV = "STATECORE_TEST_BETWEEN_STEPS"
LOG_ENV = "STATECORE_TEST_BETWEEN_LOG"
HOLD_ENV = "STATECORE_TEST_HOLD_SECONDS"
JOB_ENV = "STATECORE_TEST_HOLD_JOB"
AFTER_ENV = "STATECORE_TEST_HOLD_AFTER"
AS_ENV = "STATECORE_TEST_HOLD_AS"
UNTIL_ENV = "STATECORE_TEST_HOLD_UNTIL_LOG"

hookimpl = pluggy.HookimplMarker("airflow")


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    after = os.environ.get(AFTER_ENV, "rescale.savepoint")
    if f"{task_instance.dag_id}.{task_instance.task_id}" != after:
        return
    if STEPS_ENV in os.environ:
        run_steps(json.loads(os.environ[STEPS_ENV]), Path(os.environ[LOG_ENV]))
    if JOB_ENV in os.environ:
        _hold_lease(
            os.environ[JOB_ENV], float(os.environ[HOLD_ENV]), os.environ.get(AS_ENV, "run 99")
        )


def _hold_lease(job: str, seconds: float, operation: str) -> None:
    catalog = Catalog.connect(StatecoreConfig.resolve().catalog_url)
    if not catalog.has_job(job):
        catalog.close()
        return
    held = hold_lease(catalog, job, operation, wait=timedelta(0))
    held.__enter__()  # held now, before the rescale task starts

    def release() -> None:
        held.__exit__(None, None, None)
        catalog.close()

    watched = os.environ.get(UNTIL_ENV)
    if not watched:
        threading.Timer(seconds, release).start()
        return

    def release_once_waiting() -> None:  # or after ``seconds``, whichever comes first
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            logs = sorted(Path(watched).rglob("*.log"))  # the task logs Airflow writes as they run
            if any("waits up to" in log.read_text(errors="replace") for log in logs):
                break
            time.sleep(1)
        release()

    threading.Thread(target=release_once_waiting, daemon=True).start()
