"""``StatecoreHook``: where statecore's catalog and warehouse are, for a task.

From the Airflow connection ``statecore_default`` (type ``statecore``; its extra holds ``home``,
``catalog_url`` and ``warehouse``, each optional) when it exists, else from the environment and
the config file, as the ``statecore`` command resolves it.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk import BaseHook

from statecore.config import StatecoreConfig

__all__ = ["StatecoreHook"]


class StatecoreHook(BaseHook):
    """Resolves a :class:`~statecore.config.StatecoreConfig` for one task."""

    conn_name_attr = "statecore_conn_id"
    default_conn_name = "statecore_default"
    conn_type = "statecore"
    hook_name = "statecore"

    def __init__(self, statecore_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.statecore_conn_id = statecore_conn_id

    def get_config(self) -> StatecoreConfig:
        """The connection's settings over the environment's."""
        try:
            extra = self.get_connection(self.statecore_conn_id).extra_dejson
        except AirflowNotFoundException:
            extra = {}
        return StatecoreConfig.resolve(home=extra.get("home"),
                                       catalog_url=extra.get("catalog_url"),
                                       warehouse=extra.get("warehouse"))
