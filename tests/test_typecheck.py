"""statecore/ stays `mypy --strict` clean (the settings are in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mypy_strict() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "statecore"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:]
