"""A Spark standalone cluster from pyspark's own distribution, on the loopback.

:class:`StandaloneCluster` starts a master and workers with ``spark-class``
(``org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), each worker with one core and
1 GiB for executors, every daemon bound to 127.0.0.1 (``SPARK_LOCAL_IP`` and ``--host``), on free
ports, with its work directory and log under one folder. Each daemon runs in a process group of
its own: the executors a worker launches (and their Python workers) are in its group, so
:meth:`StandaloneCluster.kill_worker` takes a worker with its executors, as a lost machine does.
The daemons run this interpreter's environment without the fault suite's variables, so
executors run this venv's Python with the repository on ``PYTHONPATH``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pyspark

REPO = Path(__file__).resolve().parents[2]
SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
LOOPBACK = "127.0.0.1"
DAEMON_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto"
"""The daemons and executors start faster with the client compiler only (as the fault suite's
drivers do)."""
WORKER_TIMEOUT = 15
"""Seconds without a heartbeat after which the master declares a worker dead (Spark: 60); the
workers send one every quarter of it, so master and workers both get it."""
START_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def daemon_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a Spark daemon or driver: loopback, this venv's Python,
    the repository importable, and no armed fault point."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATECORE_FAULT_")}
    env.update(
        SPARK_LOCAL_IP=LOOPBACK,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    )
    env.pop("SPARK_HOME", None)
    env.update(extra or {})
    return env


@dataclass
class Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    port: int

    def tail(self, chars: int = 3000) -> str:
        return f"--- {self.name} ({self.log}) ---\n" + self.log.read_text(errors="replace")[-chars:]


@dataclass
class StandaloneCluster:
    """A master and its workers under ``root``; :meth:`start` them, :meth:`stop` them."""

    root: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    master: Daemon | None = None
    worker_daemons: list[Daemon] = field(default_factory=list)
    webui_port: int = 0
    started_seconds: float = 0.0

    @property
    def url(self) -> str:
        assert self.master is not None
        return f"spark://{LOOPBACK}:{self.master.port}"

    def start(self) -> StandaloneCluster:
        began = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        port, self.webui_port = free_port(), free_port()
        self.master = self._launch(
            "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", LOOPBACK, "--port", str(port), "--webui-port", str(self.webui_port)],
            port,
            f"-Dspark.worker.timeout={WORKER_TIMEOUT} -Dspark.master.rest.enabled=false",
        )
        for _ in range(self.workers):
            self.add_worker()
        self.wait_alive(self.workers)
        self.started_seconds = time.monotonic() - began
        return self

    def add_worker(self) -> Daemon:
        """Start one more worker (e.g. to replace a killed one)."""
        index = len(self.worker_daemons)
        work = self.root / f"worker-{index}"
        work.mkdir(parents=True, exist_ok=True)
        port = free_port()
        args = ["--host", LOOPBACK, "--port", str(port), "--webui-port", str(free_port())]
        args += ["--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work)]
        worker = self._launch(
            f"worker-{index}",
            "org.apache.spark.deploy.worker.Worker",
            [*args, self.url],
            port,
            f"-Dspark.worker.timeout={WORKER_TIMEOUT}",
        )
        self.worker_daemons.append(worker)
        return worker

    def _launch(self, name: str, main: str, args: list[str], port: int, opts: str) -> Daemon:
        log = self.root / f"{name}.log"
        env = daemon_env(
            {
                "SPARK_LOG_DIR": str(self.root / "logs"),
                "SPARK_DAEMON_MEMORY": "512m",
                "SPARK_DAEMON_JAVA_OPTS": f"{DAEMON_JAVA_OPTIONS} {opts}".strip(),
                "SPARK_WORKER_DIR": str(self.root / f"{name}-dir"),
            }
        )
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(SPARK_CLASS), main, *args],
                cwd=self.root,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: a worker's executors are in it
            )
        return Daemon(name, process, log, port)

    def state(self) -> dict[str, Any]:
        """The master's JSON (``/json/``): workers with their state, applications."""
        url = f"http://{LOOPBACK}:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:  # the loopback
            return dict(json.load(response))

    def alive_workers(self) -> list[dict[str, Any]]:
        """The running workers the master has ALIVE (a killed one stays ALIVE there until its
        heartbeat times out: it is left out)."""
        ports = {w.port for w in self.worker_daemons if w.process.poll() is None}
        try:
            workers = self.state()["workers"]
        except (OSError, ValueError):  # not serving yet, or an empty page while it starts
            return []
        return [w for w in workers if w["state"] == "ALIVE" and w["port"] in ports]

    def wait_alive(self, count: int, timeout: float = START_TIMEOUT) -> None:
        """Wait until ``count`` workers are ALIVE at the master (and no more)."""
        deadline = time.monotonic() + timeout
        while len(self.alive_workers()) != count:
            dead = [d for d in self.daemons() if d.process.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"exited: {', '.join(d.name for d in dead)}" if dead else "timeout"
                raise RuntimeError(
                    f"the standalone cluster has {len(self.alive_workers())} ALIVE workers, "
                    f"not {count} ({why})\n{self.logs()}"
                )
            time.sleep(0.3)

    def daemons(self) -> list[Daemon]:
        return ([self.master] if self.master else []) + [
            w for w in self.worker_daemons if w.process.returncode is None
        ]

    def logs(self) -> str:
        return "\n".join(
            d.tail() for d in ([self.master] if self.master else []) + self.worker_daemons
        )

    def worker_of_pid(self, pid: int) -> Daemon:
        """The running worker that ``pid`` (an executor, or a Python worker of one) runs under."""
        running = {w.process.pid: w for w in self.worker_daemons if w.process.returncode is None}
        for process in [psutil.Process(pid), *psutil.Process(pid).parents()]:
            if process.pid in running:
                return running[process.pid]
        raise LookupError(f"process {pid} runs under no running worker")

    def kill_worker(self, worker: Daemon) -> list[int]:
        """SIGKILL the worker, its executors and their Python workers (a lost machine); the
        pids killed."""
        processes = [psutil.Process(worker.process.pid)]
        processes += processes[0].children(recursive=True)
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGKILL)
        _kill_group(worker.process.pid)
        worker.process.wait()
        psutil.wait_procs(processes, timeout=10)
        return [p.pid for p in processes]

    def stop(self) -> None:
        """SIGTERM every daemon's group (workers first), SIGKILL what is left after 10 s."""
        for daemon in [*self.worker_daemons, *([self.master] if self.master else [])]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.process.pid, signal.SIGTERM)
        for daemon in [*self.worker_daemons, *([self.master] if self.master else [])]:
            try:
                daemon.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            _kill_group(daemon.process.pid)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
