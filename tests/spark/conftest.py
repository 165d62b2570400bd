"""Fixtures of the Spark runtime's tests."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from statecore.errors import ConfigError
from statecore.spark.host import stop_hosts


@pytest.fixture
def host_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of warm state hosts for one test (short: a socket's path has at most 107
    bytes); its hosts are asked to exit at the end."""
    with tempfile.TemporaryDirectory(prefix="sc-hosts-") as folder:
        monkeypatch.setenv("STATECORE_HOST_DIR", folder)
        monkeypatch.setenv("STATECORE_HOST_IDLE_SECONDS", "120")  # should the stop fail
        try:
            yield Path(folder)
        finally:
            with contextlib.suppress(ConfigError):  # a test made the folder another's
                stop_hosts()
