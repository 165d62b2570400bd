"""statecore for Airflow: a provider (the ``statecore`` connection type), a hook for the statecore
configuration and catalog, operators for savepoint, rescale, TTL cleanup and retention, a sensor
and an operator that watch and stop a streaming query, and the
Assets completed checkpoints are published as.

The package is part of the ``statecore`` distribution, registered with Airflow through the entry
point ``apache_airflow_provider`` (:func:`statecore_airflow.get_provider_info.get_provider_info`);
Airflow also puts ``plugins/`` on ``sys.path``, so DAGs import ``statecore_airflow`` either way.
Everything here is thin: the operators only turn their (templated) arguments into one statecore
library call. Names load on first use, so Airflow reads the provider info without importing
Airflow's task SDK or statecore.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statecore_airflow.assets import (
        checkpoint_asset,
        job_of_asset,
        mark_checkpoints,
        publish_checkpoints,
    )
    from statecore_airflow.hooks import StatecoreHook
    from statecore_airflow.increments import (
        record_input_read,
        skip_without_new_files,
        skip_without_new_records,
    )
    from statecore_airflow.operators import (
        RescaleOperator,
        RetentionOperator,
        SavepointOperator,
        TtlCleanupOperator,
    )
    from statecore_airflow.streams import (
        QUERY_RUN_ID,
        StreamSensor,
        StreamStopOperator,
        query_run_id,
    )

__all__ = [
    "IN_ORDER",
    "IN_ORDER_RUNS",
    "QUERY_RUN_ID",
    "RETRIED",
    "RescaleOperator",
    "RetentionOperator",
    "SavepointOperator",
    "StatecoreHook",
    "StreamSensor",
    "StreamStopOperator",
    "TtlCleanupOperator",
    "checkpoint_asset",
    "job_of_asset",
    "mark_checkpoints",
    "publish_checkpoints",
    "query_run_id",
    "record_input_read",
    "skip_without_new_files",
    "skip_without_new_records",
]

RETRIED: dict[str, Any] = {"retries": 2}
"""``default_args`` of every bundled DAG: a task is retried twice (after Airflow's
``[core] default_task_retry_delay``), so a run whose task was killed with its worker, or started
while Airflow restarted, still ends well."""

IN_ORDER: dict[str, Any] = {**RETRIED, "depends_on_past": True, "wait_for_downstream": True}
"""``default_args`` of a stateful job's DAG: its runs (scheduled and backfilled) run in order, or
not at all: a run's task waits until the previous run's same task and the tasks right after it
ended well (succeeded, or skipped with a reason), so a failed run blocks the later ones until it
is cleared and succeeds, instead of being passed over (checkpoint ids only increase: an interval
passed over is out of the state for good). ``wait_for_downstream``: without it, a backfill's
runs (up to 10 at once) ran the next day's ``check`` while the day before's Spark task still ran,
and the next day's Spark task beside it."""

IN_ORDER_RUNS = 16
"""``max_active_runs`` of a stateful job's DAG: runs wait for each other task by task
(:data:`IN_ORDER`), so a run that waits holds no task slot; with 1, the run after a failed one
(started, waiting for it) kept the failed run, once cleared, from starting again: neither ran."""

_MODULES = {
    "QUERY_RUN_ID": "streams",
    "RescaleOperator": "operators",
    "RetentionOperator": "operators",
    "SavepointOperator": "operators",
    "TtlCleanupOperator": "operators",
    "StatecoreHook": "hooks",
    "StreamSensor": "streams",
    "StreamStopOperator": "streams",
    "checkpoint_asset": "assets",
    "job_of_asset": "assets",
    "mark_checkpoints": "assets",
    "publish_checkpoints": "assets",
    "query_run_id": "streams",
    "record_input_read": "increments",
    "skip_without_new_files": "increments",
    "skip_without_new_records": "increments",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
