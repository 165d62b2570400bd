"""``StatecorePlugin``: the statecore page in Airflow's UI (Airflow 3.1+ plugin interface).

- ``fastapi_apps``: :data:`statecore_airflow.ui.app` under ``/statecore`` of the API server
  (jobs, checkpoints, key-group charts, savepoints, key lookups, DAG runs; JSON under
  ``/statecore/api/``), behind Airflow's login.
- ``external_views``: *Browse → statecore* in the navigation shows the page inside Airflow's UI,
  and every DAG run gets a *statecore checkpoint* tab with the checkpoint the run published.
- ``global_operator_extra_links``: a *statecore checkpoint* button on each task that publishes a
  checkpoint Asset (:class:`~statecore_airflow.links.CheckpointLink`).

Airflow registers it either from the installed ``statecore`` distribution (entry point
``airflow.plugins``) or, when that is not installed, from the plugins folder
(``plugins/statecore_plugin.py`` imports this class); never both, so it never reports a
duplicate plugin.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from airflow.plugins_manager import AirflowPlugin

from statecore_airflow.links import CheckpointLink
from statecore_airflow.ui import app

__all__ = ["ENTRY_POINT", "URL_PREFIX", "StatecorePlugin", "registered_by_entry_point"]

URL_PREFIX = "/statecore"
ENTRY_POINT = "statecore_airflow.plugin:StatecorePlugin"


class StatecorePlugin(AirflowPlugin):
    """The statecore page and its places in Airflow's UI."""

    name = "statecore"
    fastapi_apps = [  # noqa: RUF012 (AirflowPlugin declares these as class lists)
        {"app": app, "url_prefix": URL_PREFIX, "name": "statecore"},
    ]
    # hrefs relative to the UI's base URL, so they work under any [api] base_url
    external_views = [  # noqa: RUF012
        {
            "name": "statecore",
            "href": f"{URL_PREFIX.lstrip('/')}/",
            "url_route": "statecore",
            "destination": "nav",
            "category": "browse",
        },
        {
            "name": "statecore checkpoint",
            "href": f"{URL_PREFIX.lstrip('/')}/runs/{{DAG_ID}}/{{RUN_ID}}",
            "url_route": "statecore-run",
            "destination": "dag_run",
        },
    ]
    global_operator_extra_links = [CheckpointLink()]  # noqa: RUF012


def registered_by_entry_point() -> bool:
    """Whether an installed distribution registers :class:`StatecorePlugin` itself."""
    return any(ep.value == ENTRY_POINT for ep in entry_points(group="airflow.plugins"))
