"""An Airflow listener for ``test_lease_wait.py``: a run of the job holds its lease when the
rescale DAG's rescale task starts.

Registered in the interpreter that runs the DAG (``run_dags(listener=...)``); when the task
``savepoint`` of the DAG ``rescale`` succeeds, it takes the job's lease as a run does (a real
lease in the home's catalog), then releases it ``STATECORE_TEST_HOLD_SECONDS`` later from a
thread of its own, while Airflow goes on to the rescale task.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from typing import Any

import pluggy

from statecore.catalog import Catalog
from statecore.checkpoint.lock import hold_lease
from statecore.config import StatecoreConfig

HOLD_ENV = "STATECORE_TEST_HOLD_SECONDS"
JOB_ENV = "STATECORE_TEST_HOLD_JOB"

hookimpl = pluggy.HookimplMarker("airflow")


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    if (task_instance.dag_id, task_instance.task_id) != ("rescale", "savepoint"):
        return
    catalog = Catalog.connect(StatecoreConfig.resolve().catalog_url)
    held = hold_lease(catalog, os.environ[JOB_ENV], "run 99", wait=timedelta(0))
    held.__enter__()  # held now, before the rescale task starts

    def release() -> None:
        held.__exit__(None, None, None)
        catalog.close()

    threading.Timer(float(os.environ[HOLD_ENV]), release).start()
