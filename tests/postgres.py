"""The PostgreSQL the catalog and fault tests also run against: its URL comes from
``STATECORE_TEST_POSTGRES_URL`` (``.ci/run`` exports it; a newcomer's machine has no Postgres,
so those tests skip there), and each test works in a schema of its own."""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["POSTGRES_ENV", "run_admin"]

POSTGRES_ENV = "STATECORE_TEST_POSTGRES_URL"


def run_admin(url: sa.URL, *statements: str) -> None:
    """Run ``statements`` (e.g. ``CREATE SCHEMA``) in one transaction on the server."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.exec_driver_sql(statement)
    finally:
        engine.dispose()
