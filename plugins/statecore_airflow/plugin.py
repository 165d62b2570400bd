"""``StatecorePlugin``: the statecore page in Airflow's UI (Airflow 3.1+ plugin interface).

- ``fastapi_apps``: :data:`statecore_airflow.ui.app` under ``/statecore`` of the API server
  (jobs, checkpoints, key-group charts, savepoints, key lookups, DAG runs; JSON under
  ``/statecore/api/``), behind Airflow's login.
- ``external_views``: *Browse → statecore* in the navigation shows the page inside Airflow's UI,
  and every DAG run gets a *statecore checkpoint* tab with the checkpoint the run published.
- ``global_operator_extra_links``: a *statecore checkpoint* button on each task that publishes a
  checkpoint Asset (:class:`~statecore_airflow.links.CheckpointLink`).

Airflow registers it from the plugins folder (``plugins/statecore_plugin.py`` imports this
class).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from statecore_airflow.links import CheckpointLink
from statecore_airflow.ui import app

__all__ = ["URL_PREFIX", "StatecorePlugin"]

URL_PREFIX = "/statecore"


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
