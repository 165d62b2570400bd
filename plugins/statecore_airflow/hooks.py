"""``StatecoreHook``: where statecore's catalog and warehouse are, for a task.

From the Airflow connection ``statecore_default`` (type ``statecore``; its extra holds ``home``,
``catalog_url`` and ``warehouse``, each optional: the fields of the connection form) when it
exists, else from the environment and the config file, as the ``statecore`` command resolves it.

    with StatecoreHook().catalog() as catalog:
        catalog.latest_checkpoint("clickstream")

statecore itself is imported when a method runs, not with this module: a DAG file that builds
operators parses without loading the library (SQLAlchemy, Arrow, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

if TYPE_CHECKING:
    from statecore.catalog import Catalog
    from statecore.config import StatecoreConfig

__all__ = ["StatecoreHook"]


class StatecoreHook(BaseHook):
    """Resolves a :class:`~statecore.config.StatecoreConfig` for one task and opens its catalog.

    The connection type, its form fields and their labels are declared in the provider's info
    (:mod:`statecore_airflow.get_provider_info`), which Airflow reads without importing the hook.
    """

    conn_name_attr = "statecore_conn_id"
    default_conn_name = "statecore_default"
    conn_type = "statecore"
    hook_name = "statecore"

    def __init__(self, statecore_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.statecore_conn_id = statecore_conn_id
        self._config: StatecoreConfig | None = None

    def get_config(self) -> StatecoreConfig:
        """The connection's settings over the environment's (looked up once per hook)."""
        if self._config is None:
            from statecore.config import StatecoreConfig

            try:
                extra = self.get_connection(self.statecore_conn_id).extra_dejson
            except AirflowNotFoundException:
                extra = {}
            self._config = StatecoreConfig.resolve(
                home=extra.get("home") or None,
                catalog_url=extra.get("catalog_url") or None,
                warehouse=extra.get("warehouse") or None,
            )
        return self._config

    @contextmanager
    def catalog(self) -> Iterator[Catalog]:
        """The checkpoint catalog of :meth:`get_config`, closed when the block ends."""
        from statecore.catalog import Catalog

        with Catalog.connect(self.get_config().catalog_url) as catalog:
            yield catalog
