"""``CheckpointLink``: a *statecore checkpoint* button on every task that publishes a job's
checkpoint Asset (an outlet ``statecore://<job>``, e.g. the Spark task of ``stateful_pipeline``).

It is a global extra link of :class:`~statecore_airflow.plugin.StatecorePlugin`: the API server
computes it when the task's page asks (no XCom needed) and it leads to the statecore page's view
of the task's DAG run (``/statecore/runs/<dag_id>/<run_id>``: the checkpoint the run
completed). Tasks without such an outlet get no link.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

from statecore_airflow.assets import SCHEME

__all__ = ["CheckpointLink", "publishes_checkpoints"]


def publishes_checkpoints(operator: Any) -> bool:
    """Whether one of ``operator``'s outlets is a statecore checkpoint Asset."""
    return any(
        str(getattr(outlet, "uri", "")).startswith(f"{SCHEME}://")
        for outlet in getattr(operator, "outlets", None) or ()
    )


class CheckpointLink(BaseOperatorLink):
    """Links a task that publishes checkpoints to its run's checkpoint on the statecore page."""

    name = "statecore checkpoint"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        if not publishes_checkpoints(operator):
            return ""
        from airflow.configuration import conf

        base = conf.get("api", "base_url", fallback="/").rstrip("/")
        return (
            f"{base}/statecore/runs/{quote(ti_key.dag_id, safe='')}/{quote(ti_key.run_id, safe='')}"
        )
