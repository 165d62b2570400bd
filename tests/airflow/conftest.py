"""Fixtures of the Airflow tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def up_tmp() -> Iterator[Path]:
    """A folder for one module's ``make up`` home outside pytest's temporary root: pytest makes
    that root (``/tmp/pytest-of-<user>``) ``0700`` again whenever a pytest session starts (the
    suite runs five side by side, and tests start more), and run as root, make up's PostgreSQL
    runs as ``embedded_postgres``, which must traverse every folder above its data: it lost its
    data folder mid-run ("could not open file .../global/pg_control: Permission denied")."""
    folder = Path(tempfile.mkdtemp(prefix="statecore-make-up-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
