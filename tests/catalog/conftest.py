"""Every catalog test runs against SQLite and against Postgres.

The Postgres URL comes from ``STATECORE_TEST_POSTGRES_URL`` (CI sets it). Tests run in a schema
of their own, dropped and created again before each test, so no table of the catalog (nor its
schema-version table) survives from one test to the next, and other suites sharing the database
are left alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from statecore.catalog import Catalog

POSTGRES_ENV = "STATECORE_TEST_POSTGRES_URL"
POSTGRES_SCHEMA = "statecore_catalog_tests"

_no_postgres = pytest.mark.skipif(
    not os.environ.get(POSTGRES_ENV),
    reason=f"set {POSTGRES_ENV} to run against Postgres",
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=_no_postgres)])
def catalog_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty catalog database: a SQLite file that does not exist yet, or a fresh schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'home' / 'catalog.db'}"
    base = sa.make_url(os.environ[POSTGRES_ENV])
    admin = sa.create_engine(base)
    try:
        with admin.begin() as connection:
            connection.exec_driver_sql(f"DROP SCHEMA IF EXISTS {POSTGRES_SCHEMA} CASCADE")
            connection.exec_driver_sql(f"CREATE SCHEMA {POSTGRES_SCHEMA}")
    finally:
        admin.dispose()
    url = base.update_query_dict({"options": f"-csearch_path={POSTGRES_SCHEMA}"})
    return url.render_as_string(hide_password=False)


@pytest.fixture
def catalog(catalog_url: str) -> Iterator[Catalog]:
    with Catalog.connect(catalog_url) as opened:
        yield opened
