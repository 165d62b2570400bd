"""A job file run as the README runs it (``.venv/bin/python job.py``, no activated venv) starts
Spark's Python workers on that interpreter, not on ``python3`` from ``PATH`` (which lacks
statecore and pyarrow); an explicit ``PYSPARK_PYTHON`` still names them. The job is the PyFlink
job of docs/pyflink.md ('Whole jobs'), each run its own local Spark in a subprocess (about 10
seconds), so these run in the rest group of ``make test`` (tests/groups.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.spark

VENV_BIN = Path(sys.executable).parent
PRINTED = ["+I[ann,2]", "+I[bob,1]"]
"""What the job prints (docs/pyflink.md)."""


def job_file(folder: Path) -> Path:
    """The PyFlink job of docs/pyflink.md, as a user saves it."""
    text = (REPO / "docs" / "pyflink.md").read_text()
    start = text.index("## Whole jobs: the DataStream layer")
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert match is not None
    path = folder / "job.py"
    path.write_text(match.group(1))
    return path


def bare_environment(home: Path) -> dict[str, str]:
    """This environment as a shell without the venv activated has it: no venv's ``bin`` on
    ``PATH``, no ``PYSPARK_PYTHON``, ``PYSPARK_DRIVER_PYTHON``, ``VIRTUAL_ENV`` nor
    ``PYTHONPATH``; its own ``STATECORE_HOME``."""
    drop = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p) != VENV_BIN]
    env["PATH"] = os.pathsep.join(path)
    env["STATECORE_HOME"] = str(home)
    env.pop("STATECORE_CATALOG_URL", None)
    env.pop("STATECORE_WAREHOUSE", None)
    return env


def run_job(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    job = job_file(tmp_path)
    return subprocess.run(
        [sys.executable, str(job)],  # .venv/bin/python job.py
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_job_file_runs_on_its_interpreter_without_an_activated_venv(tmp_path: Path) -> None:
    env = bare_environment(tmp_path / "home")
    path_python = shutil.which("python3", path=env["PATH"])
    assert path_python is None or Path(path_python).parent != VENV_BIN
    ran = run_job(tmp_path, env)
    assert ran.returncode == 0, ran.stderr[-5000:]
    assert sorted(ran.stdout.splitlines()) == PRINTED


def test_explicit_pyspark_python_names_the_workers(tmp_path: Path) -> None:
    """``PYSPARK_PYTHON`` (here a wrapper that logs each start, then runs this interpreter)
    starts the workers, not the driver's interpreter."""
    log = tmp_path / "workers.log"
    wrapper = tmp_path / "worker-python"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    env = {**bare_environment(tmp_path / "home"), "PYSPARK_PYTHON": str(wrapper)}
    ran = run_job(tmp_path, env)
    assert ran.returncode == 0, ran.stderr[-5000:]
    assert sorted(ran.stdout.splitlines()) == PRINTED
    assert "pyspark.daemon" in log.read_text() or "pyspark.worker" in log.read_text()
