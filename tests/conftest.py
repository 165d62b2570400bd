"""Shared fixtures: one local Spark session per test run, and an isolated statecore home.

``--group`` splits a run in two that ``make test`` runs side by side: ``jvm``, the
tests whose fixtures reach the in-process Spark session or another JVM or server the run starts once
(``tests/groups.py``), and ``rest``, all the others (Airflow and Spark in subprocesses of their
own, the CLI, the backends, Helm...). Only one of the two owns the Spark session, the cluster
and the S3 server, so each is still started once per run. Without ``--group`` a run
takes every test.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statecore.config import StatecoreConfig
from tests.groups import GROUPS, group_of, jvm_group_only

REPO = Path(__file__).resolve().parents[1]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--group",
        choices=GROUPS,
        default=None,
        help="only the tests of one group: jvm (their fixtures reach spark, cluster or "
        "s3_server) or rest (all the others); make test runs both at once",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    group = config.getoption("--group")
    if group is None:
        return
    kept = [item for item in items if group_of(item) == group]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if group_of(item) != group])
        items[:] = kept


@pytest.fixture
def statecore_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StatecoreConfig:
    """A fresh STATECORE_HOME (SQLite catalog, local warehouse) for one test."""
    home = tmp_path / "statecore"
    monkeypatch.setenv("STATECORE_HOME", str(home))
    monkeypatch.delenv("STATECORE_CATALOG_URL", raising=False)
    monkeypatch.delenv("STATECORE_WAREHOUSE", raising=False)
    return StatecoreConfig.resolve(env={"STATECORE_HOME": str(home)})


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The one Spark session of the test run (``local[2]``, statecore's session builder: Delta
    Lake when ``make jars`` has run, loopback), its workers on this interpreter. Delta rebuilds
    a table's snapshot (the state at a version) in 2 partitions instead of its default 50, as
    shuffles take 2: the tests' tables are small, and a 2-core machine ran 50 tasks per
    ``VERSION AS OF`` read."""
    jvm_group_only(request)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p
    )
    from statecore.spark.session import build_session

    session = build_session(
        master="local[2]",
        app_name="statecore-tests",
        config={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.driver.memory": "2g",
        },
        log_level="ERROR",
    )
    yield session
    session.stop()
