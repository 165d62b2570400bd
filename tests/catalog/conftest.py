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
from tests.postgres import POSTGRES_ENV, run_admin

# One schema per test process, so test runs sharing the database never see each other's tables.
POSTGRES_SCHEMA = f"statecore_catalog_tests_{os.getpid()}"

_no_postgres = pytest.mark.skipif(
    not os.environ.get(POSTGRES_ENV),
    reason=f"set {POSTGRES_ENV} to run against Postgres",
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=_no_postgres)])
def catalog_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty catalog database: a SQLite file that does not exist yet, or a fresh schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'home' / 'catalog.db'}"
        return
    base = sa.make_url(os.environ[POSTGRES_ENV])
    run_admin(
        base, f"DROP SCHEMA IF EXISTS {POSTGRES_SCHEMA} CASCADE", f"CREATE SCHEMA {POSTGRES_SCHEMA}"
    )
    url = base.update_query_dict({"options": f"-csearch_path={POSTGRES_SCHEMA}"})
    yield url.render_as_string(hide_password=False)
    run_admin(base, f"DROP SCHEMA IF EXISTS {POSTGRES_SCHEMA} CASCADE")


@pytest.fixture
def catalog(catalog_url: str) -> Iterator[Catalog]:
    with Catalog.connect(catalog_url) as opened:
        yield opened
