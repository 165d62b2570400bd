"""The install of ``make setup`` / ``make demo`` / ``make test`` (the Makefile's ``$(STAMP)``
target) says what it is doing as it goes: a real install of the pinned set into a temporary
virtualenv (``make VENV=<tmp> <tmp>/.installed``). From uv's warm cache it took 40 s on a quiet
machine, 2.5 minutes on a busy one (uv builds pyspark from its sdist each time)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]


def test_documented_path_install_shows_each_step_as_it_goes(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # as a newcomer types it: not inside another make (make test's MAKELEVEL and MAKEFLAGS would
    # add "make[1]: Entering directory" lines)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "MAKELEVEL", "MAKEFLAGS", "MFLAGS")
    }
    began = time.monotonic()
    process = subprocess.Popen(
        ["make", f"VENV={venv}", f"{venv}/.installed"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    try:
        lines = [(time.monotonic() - began, line.rstrip()) for line in process.stdout]
        assert process.wait(timeout=600) == 0, "\n".join(line for _, line in lines[-40:])
        output = "\n".join(line for _, line in lines)
        # each step named as it starts, in order, the first at once
        steps = [
            (at, m[1]) for at, line in lines if (m := re.match(r"statecore: \[(\d)/4\] ", line))
        ]
        assert [step for _, step in steps] == ["1", "2", "3", "4"], output
        assert steps[0][0] < 10
        assert "statecore: [3/4] the pinned set (requirements-dev.lock" in output
        # what uv resolves and installs is shown, not hidden by --quiet
        assert re.search(r"^Resolved \d+ packages in ", output, re.M), output
        assert re.search(r"^Installed \d+ packages in ", output, re.M), output
        assert re.search(r"^ \+ pyspark==", output, re.M), output
        assert output.rstrip().endswith(f"statecore: installed into {venv}")
        assert (venv / ".installed").exists() and (venv / "bin" / "statecore").exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        shutil.rmtree(venv, ignore_errors=True)
