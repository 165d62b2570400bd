"""The cluster tests' fixtures: one Spark standalone cluster (a master and two workers of one
core each, on the loopback) per test session, and a driver subprocess per scenario run on it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.groups import jvm_group_only

from .standalone import REPO, StandaloneCluster, daemon_env

DRIVER_TIMEOUT = 480


@pytest.fixture(scope="session")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[StandaloneCluster]:
    """The session's standalone cluster, stopped (and killed if need be) at the end."""
    jvm_group_only(request)
    standalone = StandaloneCluster(tmp_path_factory.mktemp("standalone"))
    try:
        standalone.start()
        print(f"\nstandalone cluster {standalone.url} up in {standalone.started_seconds:.1f} s")
        yield standalone
    finally:
        standalone.stop()


@pytest.fixture
def two_workers(cluster: StandaloneCluster) -> Iterator[StandaloneCluster]:
    """The cluster, with two ALIVE workers again after the test (one replaces a killed one)."""
    yield cluster
    if len(cluster.alive_workers()) < 2:
        cluster.add_worker()
        cluster.wait_alive(2)


class Driver:
    """A driver subprocess running one scenario of :mod:`tests.cluster.job` on the cluster."""

    def __init__(
        self, cluster: StandaloneCluster, folder: Path, spec: dict[str, Any], **env: str
    ) -> None:
        self.cluster = cluster
        self.spec = {
            "master": cluster.url,
            "probes": str(folder / "probes"),
            "result": str(folder / f"result-{time.monotonic_ns()}.json"),
            **spec,
        }
        self.log = folder / f"driver-{time.monotonic_ns()}.log"
        self.began = time.monotonic()
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.cluster.job", json.dumps(self.spec)],
                cwd=REPO,
                env=daemon_env(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its JVM and Python with it, killed together at the end
            )

    def wait(self, timeout: float = DRIVER_TIMEOUT) -> int:
        """Wait for the driver's end (killing it after ``timeout`` seconds), then kill what is
        left of its process group (its JVM)."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            raise AssertionError(f"the driver ran over {timeout} s:\n{self.logs()}") from None
        finally:
            self.seconds = time.monotonic() - self.began
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)

    def result(self) -> dict[str, Any]:
        """Wait for a successful end; what the scenario reported."""
        returncode = self.wait()
        assert returncode == 0, f"the driver failed ({returncode}):\n{self.logs()}"
        return dict(json.loads(Path(self.spec["result"]).read_text()))

    def logs(self) -> str:
        executors = sorted(self.cluster.root.glob("worker-*/app-*/*/stderr"))
        tails = [f"--- {p} ---\n{p.read_text(errors='replace')[-2000:]}" for p in executors[-4:]]
        return "\n".join([self.log.read_text(errors="replace")[-6000:], *tails])


@pytest.fixture
def drive(cluster: StandaloneCluster, tmp_path: Path) -> Iterator[Callable[..., Driver]]:
    """``drive(spec, **env)``: start a driver subprocess for ``spec`` on the cluster (killed
    at the end of the test if it still runs)."""

    started: list[Driver] = []

    def start(spec: dict[str, Any], **env: str) -> Driver:
        started.append(Driver(cluster, tmp_path, spec, **env))
        return started[-1]

    yield start
    for driver in started:  # a failed test's driver must not keep holding the cluster's cores
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.process.pid, signal.SIGKILL)
        driver.process.wait()
