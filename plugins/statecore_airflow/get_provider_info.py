"""The provider info Airflow reads through the entry point ``apache_airflow_provider``.

Declares the ``statecore`` connection type with its form fields (``home``, ``catalog_url``,
``warehouse``: the keys of the connection's extra that
:class:`~statecore_airflow.hooks.StatecoreHook` reads), the hook, the operators and the
``statecore://`` Asset scheme. Airflow reads it without importing the hook or the library.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

__all__ = ["CONNECTION_FIELDS", "get_provider_info"]

PACKAGE = "statecore"  # the distribution this provider is part of

CONNECTION_FIELDS: dict[str, dict[str, Any]] = {
    "home": {
        "label": "statecore home",
        "description": "STATECORE_HOME: default folder of the catalog and the warehouse",
        "schema": {"type": ["string", "null"]},
    },
    "catalog_url": {
        "label": "Catalog URL",
        "description": "SQLAlchemy URL of the checkpoint catalog, e.g. "
        "postgresql+psycopg2://user:password@host/statecore (default: SQLite in the home)",
        "schema": {"type": ["string", "null"], "format": "password"},
    },
    "warehouse": {
        "label": "Warehouse",
        "description": "Root of the Delta tables: a folder or s3://bucket/prefix "
        "(default: warehouse/ in the home)",
        "schema": {"type": ["string", "null"]},
    },
}


def _version() -> str:
    try:
        return version(PACKAGE)
    except PackageNotFoundError:  # imported from a source tree that is not installed
        return "0+unknown"


def get_provider_info() -> dict[str, Any]:
    """Provider info as ``airflow/provider_info.schema.json`` describes it."""
    return {
        "package-name": PACKAGE,
        "name": "statecore",
        "description": "Apache Flink's state model for PySpark jobs, checkpointed to Delta Lake: "
        "savepoint, rescale, TTL cleanup and retention operators and the statecore connection.",
        "versions": [_version()],
        "integrations": [
            {
                "integration-name": "statecore",
                "tags": ["service"],
            }
        ],
        "operators": [
            {
                "integration-name": "statecore",
                "python-modules": ["statecore_airflow.operators", "statecore_airflow.streams"],
            }
        ],
        "sensors": [
            {
                "integration-name": "statecore",
                "python-modules": ["statecore_airflow.streams"],
            }
        ],
        "hooks": [
            {
                "integration-name": "statecore",
                "python-modules": ["statecore_airflow.hooks"],
            }
        ],
        "asset-uris": [{"schemes": ["statecore"], "handler": None}],
        "connection-types": [
            {
                "connection-type": "statecore",
                "hook-class-name": "statecore_airflow.hooks.StatecoreHook",
                "hook-name": "statecore",
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "login", "password", "port", "extra"],
                    "relabeling": {},
                },
                "conn-fields": CONNECTION_FIELDS,
            }
        ],
    }
