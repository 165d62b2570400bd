"""Shared fixtures: one local Spark session per test run, and an isolated statecore home."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statecore.config import StatecoreConfig

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def statecore_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StatecoreConfig:
    """A fresh STATECORE_HOME (SQLite catalog, local warehouse) for one test."""
    home = tmp_path / "statecore"
    monkeypatch.setenv("STATECORE_HOME", str(home))
    monkeypatch.delenv("STATECORE_CATALOG_URL", raising=False)
    monkeypatch.delenv("STATECORE_WAREHOUSE", raising=False)
    return StatecoreConfig.resolve(env={"STATECORE_HOME": str(home)})


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one Spark session of the test run (``local[2]``, statecore's session builder: Delta
    Lake when ``make jars`` has run, loopback), its workers on this interpreter."""
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
            "spark.driver.memory": "2g",
        },
        log_level="ERROR",
    )
    yield session
    session.stop()
