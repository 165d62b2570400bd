"""Fixtures of the fault suite: a fresh home and catalog (SQLite or a Postgres schema of its
own) per case, and the outcome of a clean run per API and backend."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from statecore.config import StatecoreConfig
from tests.postgres import POSTGRES_ENV, run_admin

from .harness import LEASE_ENV, LEASE_TIMEOUT
from .scenario import CHECKPOINTS, Outcome, expected_outcome, read_outcome, run_checkpoint

_schemas = itertools.count()


class Homes:
    """Fresh homes under a folder, each with its catalog: SQLite, or a new Postgres schema
    (dropped by :meth:`drop`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.schemas: list[tuple[sa.URL, str]] = []

    def make(self, catalog: str, name: str = "home") -> StatecoreConfig:
        home = self.root / name
        if catalog == "sqlite":
            return StatecoreConfig.resolve(home=str(home), env=LEASE_ENV)
        if not os.environ.get(POSTGRES_ENV):
            pytest.skip(f"no PostgreSQL here: set {POSTGRES_ENV} (CI does) for these cases")
        base = sa.make_url(os.environ[POSTGRES_ENV])
        schema = f"statecore_faults_{os.getpid()}_{next(_schemas)}"
        run_admin(base, f"CREATE SCHEMA {schema}")
        self.schemas.append((base, schema))
        url = base.update_query_dict({"options": f"-csearch_path={schema}"})
        return StatecoreConfig.resolve(
            home=str(home), catalog_url=url.render_as_string(hide_password=False), env=LEASE_ENV
        )

    def drop(self) -> None:
        for base, schema in self.schemas:
            run_admin(base, f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def fault_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], StatecoreConfig]]:
    """``fault_home(catalog)``: a fresh home whose catalog is SQLite or a new Postgres schema
    (dropped after the test). A recovery run here waits out a dead run's lease like the
    subprocesses do."""
    monkeypatch.setenv("STATECORE_LEASE_TIMEOUT", LEASE_TIMEOUT)
    homes = Homes(tmp_path)
    yield homes.make
    homes.drop()


@pytest.fixture(scope="session")
def clean_outcome(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str, str], Outcome]:
    """``clean_outcome(api, backend)``: what a run that never failed leaves (checked against
    pandas once), computed on first use."""
    done: dict[tuple[str, str], Outcome] = {}

    def outcome(api: str, backend: str) -> Outcome:
        if (api, backend) not in done:
            home = tmp_path_factory.mktemp(f"clean-{api}-{backend}")
            config = StatecoreConfig.resolve(home=str(home), env=LEASE_ENV)
            for checkpoint_id in CHECKPOINTS:
                run_checkpoint(spark, config, api=api, backend=backend, checkpoint_id=checkpoint_id)
            clean = read_outcome(config)
            assert clean == expected_outcome(), f"the clean {api}/{backend} run is wrong"
            done[api, backend] = clean
        return done[api, backend]

    return outcome
