"""One S3 server per test session (moto's, :mod:`tests.object_store.s3_server`, on 127.0.0.1),
and a statecore home whose warehouse is a fresh prefix of one of its buckets.

The credentials are made up per session and given to statecore only through the environment
(as the Helm chart's secret does), so a test can grep for them everywhere statecore writes.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statecore.config import StatecoreConfig
from tests.groups import jvm_group_only
from tests.object_store.process import S3Server, running_s3_server

__all__ = ["BUCKETS", "S3Server"]

REPO = Path(__file__).resolve().parents[2]
BUCKETS = ("warehouse", "savepoints", "output")
_prefixes = itertools.count()


@pytest.fixture(scope="session")
def s3_server(request: pytest.FixtureRequest) -> Iterator[S3Server]:
    """moto's S3 server in a subprocess, bound to 127.0.0.1, with the test buckets."""
    jvm_group_only(request)
    with running_s3_server(BUCKETS) as server:
        yield server


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The server's settings in this process's environment (nothing else names them)."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_S3_ALLOW_UNSAFE_RENAME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.fixture
def s3_home(s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StatecoreConfig:
    """A fresh home: SQLite catalog on local disk, warehouse ``s3://warehouse/<fresh prefix>``."""
    home = tmp_path / "statecore"
    warehouse = f"s3://warehouse/t{next(_prefixes)}-{secrets.token_hex(3)}"
    monkeypatch.setenv("STATECORE_HOME", str(home))
    monkeypatch.setenv("STATECORE_WAREHOUSE", warehouse)
    monkeypatch.delenv("STATECORE_CATALOG_URL", raising=False)
    return StatecoreConfig.resolve(home=str(home), warehouse=warehouse, env={})


@pytest.fixture
def s3_spark(spark: Any, s3_env: S3Server) -> Iterator[Any]:
    """The shared Spark session, its Python workers given the S3 settings (as
    ``spark.executorEnv.*`` gives them in a cluster)."""
    environment: dict[str, str] = spark.sparkContext.environment
    before = dict(environment)
    environment.update(s3_env.env)
    yield spark
    environment.clear()
    environment.update(before)
