"""The Asset a job's completed checkpoints are published as (``statecore://<job>``).

A DAG run that runs a job publishes the checkpoints **that run** completed: an early task of the
run records where the job stood (:func:`mark_checkpoints`, an XCom of that task in this run), and
the publishing task (:func:`publish_checkpoints`) reads that mark from the same run and publishes
the job's completed checkpoints above it. Nothing is read from another run's XCom, so every run,
the first or the hundredth, publishes exactly its own checkpoints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset

if TYPE_CHECKING:
    from statecore.catalog import Catalog

__all__ = [
    "MARK_KEY",
    "SCHEME",
    "checkpoint_asset",
    "job_of_asset",
    "mark_checkpoints",
    "publish_checkpoints",
]

SCHEME = "statecore"
MARK_KEY = "checkpoints_before"
"""The XCom key of the mark :func:`mark_checkpoints` records."""


def checkpoint_asset(job: str) -> Asset:
    """The Asset updated by every completed checkpoint of ``job``."""
    return Asset(name=f"statecore-{job}", uri=f"{SCHEME}://{job}")


def job_of_asset(uri: str) -> str | None:
    """The job whose checkpoint Asset ``uri`` is (``statecore://<job>``), else ``None``."""
    prefix = f"{SCHEME}://"
    if not uri.startswith(prefix):
        return None
    return uri[len(prefix) :].strip("/") or None


def mark_checkpoints(context: Any, catalog: Catalog, job: str) -> int | None:
    """Record, as this task's XCom ``checkpoints_before`` in this DAG run, the id of ``job``'s
    highest completed checkpoint (``None`` before its first): the checkpoints above it are the
    ones this run completes."""
    mark = catalog.highest_completed_id(job) if catalog.has_job(job) else None
    context["ti"].xcom_push(key=MARK_KEY, value=mark)
    return mark


def publish_checkpoints(
    context: Any, catalog: Catalog, job: str, last_checkpoint: int | None, *, marked_by: str
) -> list[int]:
    """The ids of the checkpoints of ``job`` this DAG run completed — those above the mark task
    ``marked_by`` recorded earlier in the same run (:func:`mark_checkpoints`) — published as the
    event of ``job``'s Asset (an outlet of the task) with ``last_checkpoint``, the latest one."""
    from statecore.ops.streams import checkpoints_after  # DAG files import this module

    mark = context["ti"].xcom_pull(task_ids=marked_by, key=MARK_KEY)  # this run's only
    completed = checkpoints_after(catalog, job, mark)
    context["outlet_events"][checkpoint_asset(job)].extra = {
        "job": job,
        "checkpoints": completed,
        "last_checkpoint": last_checkpoint,
        "run_id": context["run_id"],
    }
    return completed
