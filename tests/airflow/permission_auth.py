"""An auth manager with per-DAG permissions, for ``tests/airflow/test_permission_ui.py``.

Airflow's ``SimpleAuthManager`` lets a role read every DAG or none. This one keeps its users
(``[core] simple_auth_manager_users``, e.g. ``alice:admin,bob:viewer``), logins and roles, and
narrows the DAGs: a user named in :data:`READS` reads only the DAGs listed there, and never
"every DAG" at once; everyone else is as ``SimpleAuthManager`` has them. Set it with
``AIRFLOW__CORE__AUTH_MANAGER=tests.airflow.permission_auth.ShopAuthManager``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.base_auth_manager import ResourceMethod

__all__ = ["READS", "ShopAuthManager"]

READS = {"bob": frozenset({"shop_a"})}
"""The DAGs each narrowed user may read."""


class ShopAuthManager(SimpleAuthManager):
    """``SimpleAuthManager`` with the DAGs of :data:`READS`' users narrowed to theirs."""

    def is_authorized_dag(
        self,
        *,
        method: ResourceMethod,
        user: SimpleAuthManagerUser,
        access_entity: DagAccessEntity | None = None,
        details: DagDetails | None = None,
    ) -> bool:
        allowed = super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        )
        dags = READS.get(user.username)
        if dags is None or not allowed:
            return allowed
        return details is not None and details.id in dags
