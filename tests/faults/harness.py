"""Run the fault job in a subprocess armed with a kill point, and recover as a retry would.

A :class:`Case` names the kill point (``name[:nth]``, see :mod:`statecore.snapshot.faults`), which
process dies (``driver``: the Spark driver, as when the Airflow worker running the job dies;
``worker``: the Python worker of a task, which Spark then retries), the API, the backend, the
catalog and the checkpoint the fault hits. :func:`run_case` runs the checkpoints before it in
this process, the faulted one in a subprocess (its whole process group, JVM and Python workers
included, is killed once the driver is gone), then that checkpoint again and the rest here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statecore.config import StatecoreConfig
from statecore.snapshot.faults import FAULT_MARKER_ENV, FAULT_POINT_ENV

from .scenario import CHECKPOINTS, run_checkpoint

REPO = Path(__file__).resolve().parents[2]
LEASE_TIMEOUT = "2"
"""Seconds after which the lease of a dead run may be taken over (``STATECORE_LEASE_TIMEOUT``)."""
LEASE_ENV = {"STATECORE_LEASE_TIMEOUT": LEASE_TIMEOUT}
"""The environment the configurations of this process are resolved with."""
RECOVERY_RETRY_SECONDS = 20.0
SUBPROCESS_TIMEOUT = 300


@dataclass(frozen=True)
class Case:
    point: str
    kill: str = "driver"
    api: str = "record"
    backend: str = "heap"
    catalog: str = "sqlite"
    faulted: int = 2

    def __str__(self) -> str:
        return f"{self.point}-{self.kill}-{self.api}-{self.backend}-{self.catalog}-cp{self.faulted}"


@dataclass(frozen=True)
class Killed:
    """What the armed subprocess did."""

    returncode: int
    fired: str  # the marker's content: which point fired in which process ("" if none)
    log: str
    seconds: float


def subprocess_env(config: StatecoreConfig, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in (FAULT_POINT_ENV, FAULT_MARKER_ENV, "STATECORE_FAULT_PID", "STATECORE_WAREHOUSE"):
        env.pop(name, None)
    env.update(
        STATECORE_HOME=config.home,
        STATECORE_CATALOG_URL=config.catalog_url,
        STATECORE_WAREHOUSE=config.warehouse,
        STATECORE_LEASE_TIMEOUT=LEASE_TIMEOUT,
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
    )
    env.update(extra)
    return env


def run_job(config: StatecoreConfig, **job: Any) -> Killed:
    """The job of :func:`start_job` in a subprocess (its own process group), armed with its
    ``point``; waits for it to end or die, then kills what is left of its group (the JVM and
    the Python workers)."""
    return start_job(config, **job).finish()


@dataclass
class Started:
    """An armed job's subprocess on its way (:func:`start_job`)."""

    process: subprocess.Popen[bytes]
    marker: Path
    log: Path
    began: float

    def finish(self) -> Killed:
        """Wait for the job to end or die, then kill what is left of its group."""
        try:
            returncode = self.process.wait(timeout=SUBPROCESS_TIMEOUT)
        finally:
            _kill_group(self.process.pid)
        return Killed(
            returncode=returncode,
            fired=self.marker.read_text() if self.marker.exists() else "",
            log=self.log.read_text(errors="replace"),
            seconds=time.monotonic() - self.began,
        )

    def finish_killed(self) -> None:
        """Kill the job's whole group now (a case never checked)."""
        _kill_group(self.process.pid)
        self.process.wait()


def start_job(
    config: StatecoreConfig,
    *,
    api: str,
    backend: str,
    checkpoints: tuple[int, ...],
    point: str | None,
    kill: str,
    marker: Path,
    retry_for: float = 0.0,
) -> Started:
    """Start the job (``checkpoints`` of the fault scenario with ``api`` and ``backend``) in a
    subprocess armed with ``point``, killing ``kill``, without waiting for it."""
    command = [
        sys.executable,
        "-m",
        "tests.faults.job",
        "--api",
        api,
        "--backend",
        backend,
        "--checkpoints",
        ",".join(map(str, checkpoints)),
        "--kill",
        kill,
        "--retry-for",
        str(retry_for),
    ]
    if kill == "worker":
        command += ["--task-retries", "1"]
    return start_armed(command, config, point=point, marker=marker)


def start_armed(
    command: list[str], config: StatecoreConfig, *, point: str | None, marker: Path
) -> Started:
    """Start ``command`` (a driver of this repository's, e.g. ``python -m tests.faults.job``) in a
    process group of its own with the environment of ``config``, armed with ``point`` (fired
    once: ``marker``, its log beside it), without waiting for it."""
    armed = {FAULT_POINT_ENV: point, FAULT_MARKER_ENV: str(marker)} if point else {}
    log = marker.with_suffix(".log")
    began = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=subprocess_env(config, **armed),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Started(process, marker, log, began)


def _kill_group(pgid: int) -> None:
    """SIGKILL the rest of the subprocess's group, as a dead container takes its children."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def run_case(spark: Any, config: StatecoreConfig, case: Case, marker: Path) -> Killed:
    """The checkpoints before ``case.faulted`` here, the faulted one in a subprocess armed with
    the case's point, then the faulted one again (the retry) and the rest here."""
    killed = start_case(spark, config, case, marker).finish()
    recover(spark, config, case)
    return killed


def start_case(spark: Any, config: StatecoreConfig, case: Case, marker: Path) -> Started:
    """The checkpoints before ``case.faulted`` here, then the faulted one's armed subprocess,
    started: :meth:`Started.finish` waits for it, :func:`recover` retries as a retry would."""
    for checkpoint_id in CHECKPOINTS[: CHECKPOINTS.index(case.faulted)]:
        run_checkpoint(
            spark, config, api=case.api, backend=case.backend, checkpoint_id=checkpoint_id
        )
    return start_job(
        config,
        api=case.api,
        backend=case.backend,
        checkpoints=(case.faulted,),
        point=case.point,
        kill=case.kill,
        marker=marker,
    )


def recover(spark: Any, config: StatecoreConfig, case: Case) -> None:
    """The faulted checkpoint again (the retry, waiting out the dead run's lease) and the rest."""
    for checkpoint_id in CHECKPOINTS[CHECKPOINTS.index(case.faulted) :]:
        run_checkpoint(
            spark,
            config,
            api=case.api,
            backend=case.backend,
            checkpoint_id=checkpoint_id,
            retry_for=RECOVERY_RETRY_SECONDS,
        )
