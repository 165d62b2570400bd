"""An Airflow listener for ``test_rescale_race.py``: a run of the job completes between the
rescale DAG's savepoint task and its rescale task.

Registered in the interpreter that runs the DAG (``run_dags(listener=...)``); when the task
``savepoint`` of the DAG ``rescale`` succeeds, it runs the Spark steps in
``STATECORE_TEST_BETWEEN_STEPS`` (:func:`tests.airflow.ops_jobs.run_steps`, a real run of the
job in a Spark of its own), before Airflow starts the next task.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pluggy

from tests.airflow.ops_jobs import run_steps

STEPS_ENV = "STATECORE_TEST_BETWEEN_STEPS"
LOG_ENV = "STATECORE_TEST_BETWEEN_LOG"

hookimpl = pluggy.HookimplMarker("airflow")


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    if (task_instance.dag_id, task_instance.task_id) != ("rescale", "savepoint"):
        return
    run_steps(json.loads(os.environ[STEPS_ENV]), Path(os.environ[LOG_ENV]))
