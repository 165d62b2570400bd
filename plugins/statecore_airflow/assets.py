"""The Asset a job's completed checkpoints are published as (``statecore://<job>``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset

if TYPE_CHECKING:
    from statecore.catalog import Catalog

__all__ = ["SCHEME", "checkpoint_asset", "publish_checkpoints"]

SCHEME = "statecore"


def checkpoint_asset(job: str) -> Asset:
    """The Asset updated by every completed checkpoint of ``job``."""
    return Asset(name=f"statecore-{job}", uri=f"{SCHEME}://{job}")


def publish_checkpoints(
    context: Any, catalog: Catalog, job: str, last_checkpoint: int | None
) -> list[int]:
    """The ids of the checkpoints of ``job`` this run of the task completed (those after the
    last one its previous run published), published as the event of ``job``'s Asset (an outlet
    of the task) with ``last_checkpoint``, the latest one."""
    from statecore.ops.streams import checkpoints_after  # DAG files import this module

    ti = context["ti"]
    previous = ti.xcom_pull(task_ids=ti.task_id, include_prior_dates=True)
    completed = checkpoints_after(catalog, job, previous["last_checkpoint"] if previous else None)
    context["outlet_events"][checkpoint_asset(job)].extra = {
        "job": job,
        "checkpoints": completed,
        "last_checkpoint": last_checkpoint,
    }
    return completed
