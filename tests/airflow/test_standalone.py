"""Smoke test of the real Airflow ``make up`` starts (scripts/airflow_up: PostgreSQL and the
supervised components), driven over its REST API; one start for the module's tests.

Airflow runs in an isolated AIRFLOW_HOME on a free port, on the Makefile's default host
(127.0.0.1); the fixture gets a token with the generated admin password, unpauses the
``savepoint`` DAG, triggers it with ``{"logical_date": null, "conf": ...}``, waits (bounded) for
it to finish, and stops Airflow with ``make down``, timed. The tests check the savepoint in the
catalog, that the API server listened on loopback only, and that ``make down`` took under 15 s
and left no process (none in its process group, none with its AIRFLOW_HOME in its environment).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog
from statecore.checkpoint.points import resolve_point
from statecore.cli.demo import airflow_environment
from statecore.config import StatecoreConfig
from tests.airflow.dagrun import REPO
from tests.listening import group_pids
from tests.listening import listening as _listening
from tests.ops.statebuilder import Table, value_rows, write_checkpoint

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

START_TIMEOUT = 420
RUN_TIMEOUT = 300
STOP_TIMEOUT = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Api:
    """A tiny REST client of the local API server."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.token: str | None = None

    def call(self, method: str, path: str, body: Any = None) -> Any:
        request = urllib.request.Request(
            self.base + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Content-Type": "application/json",
                **({"Authorization": f"Bearer {self.token}"} if self.token else {}),
            },
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def wait(self, what: str, check: Any, timeout: float, process: subprocess.Popen[bytes]) -> Any:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert process.poll() is None, f"make up exited while waiting for {what}"
            try:
                found = check()
                if found:
                    return found
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = exc
            time.sleep(3)
        raise AssertionError(f"timed out waiting for {what} (last error: {last})")


def stop(process: subprocess.Popen[bytes], log: Path) -> str:
    """Ctrl-C as a user gives it: SIGINT to ``airflow standalone``, which stops its components;
    if one is still stopping a while later (the scheduler can wait forever for its LocalExecutor
    workers), Ctrl-C again, for the whole group. Whatever of the group is left then is killed
    (only processes this test started). How it stopped: ``sigint``, ``sigint twice``, ``killed``.
    """
    group = process.pid  # start_new_session: the group is standalone's
    how = "sigint"
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        left = subprocess.run(
            ["ps", "-o", "pid,ppid,stat,etime,args", "-g", str(group)],
            capture_output=True,
            text=True,
        ).stdout
        with log.open("a") as out:
            out.write(f"\nstill running {STOP_TIMEOUT} s after SIGINT:\n{left}")
        how = "sigint twice"
        os.killpg(group, signal.SIGINT)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            how = "killed"
    try:
        os.killpg(group, signal.SIGKILL)  # workers a stuck scheduler left behind
    except ProcessLookupError:
        pass
    process.wait(timeout=30)
    return how


def _environ(pid: int) -> dict[str, str]:
    """The environment of process ``pid`` (empty if it is gone or not ours to read)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {name: value for name, _, value in pairs}


def processes_with(airflow_home: str) -> list[str]:
    """The command lines of the processes whose environment has this AIRFLOW_HOME."""
    wanted = f"AIRFLOW_HOME={airflow_home}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and wanted in (proc / "environ").read_bytes().split(b"\0"):
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


@dataclass
class Standalone:
    """What one ``make up`` ... ``make down`` showed."""

    config: StatecoreConfig
    env: dict[str, str]
    port: int
    run_state: str
    bound: set[tuple[str, int]]
    """What the processes of Airflow's group listened on while it ran."""
    python_paths: set[str]
    """The ``PYTHONPATH`` of each process of Airflow's group while it ran."""
    down: subprocess.CompletedProcess[str]
    down_seconds: float
    group: int
    log_tail: str
    console: str
    """All that ``make up`` printed."""


@pytest.fixture(scope="module")
def standalone(up_tmp: Path) -> Standalone:
    """``make up`` in the background as a user starts it (on a free port, on the Makefile's
    default host: ``AIRFLOW__API__HOST`` unset), the ``savepoint`` DAG triggered over the REST
    API and waited for, then ``make down``, timed."""
    tmp_path = up_tmp
    home = tmp_path / "home"
    config = StatecoreConfig.resolve(home=str(home), env={})
    write_checkpoint(config, "clicks", 1, {"total": Table(value_rows({"a": 1.0, "b": 2.0}))})
    port = free_port()
    env = airflow_environment(REPO, home)
    env.pop("AIRFLOW__API__HOST", None)  # the Makefile's default: loopback
    env.update(
        {
            "AIRFLOW__API__PORT": str(port),
            # the scheduler's and triggerer's log servers (8793, 8794 by default, on every
            # interface): ports of their own, as another Airflow of the suite may run beside
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        }
    )
    log = (tmp_path / "standalone.log").open("wb")
    process = subprocess.Popen(  # as a user starts it, in the background
        ["make", "-s", "up"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    api = Api(port)
    stopped = None
    try:
        api.wait(
            "the API server",
            lambda: api.call("GET", "/api/v2/monitor/health"),
            START_TIMEOUT,
            process,
        )
        group = int((Path(env["AIRFLOW_HOME"]) / "standalone.pid").read_text().split()[1])
        bound = {address for pid in group_pids(group) for address in _listening(pid)}
        environs = [_environ(pid) for pid in group_pids(group)]
        python_paths = {each.get("PYTHONPATH", "") for each in environs if each}  # not zombies
        passwords = Path(env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
        password = json.loads(passwords.read_text())["admin"]
        api.token = api.call("POST", "/auth/token", {"username": "admin", "password": password})[
            "access_token"
        ]
        api.wait(
            "the savepoint DAG to be parsed",
            lambda: api.call("GET", "/api/v2/dags/savepoint"),
            START_TIMEOUT,
            process,
        )
        api.call("PATCH", "/api/v2/dags/savepoint", {"is_paused": False})
        run = api.call(
            "POST",
            "/api/v2/dags/savepoint/dagRuns",
            {"logical_date": None, "conf": {"job": "clicks", "name": "smoke"}},
        )
        path = f"/api/v2/dags/savepoint/dagRuns/{run['dag_run_id']}"

        def finished() -> str | None:
            state = api.call("GET", path)["state"]
            return state if state in ("success", "failed") else None

        run_state = api.wait("the run", finished, RUN_TIMEOUT, process)
        began = time.monotonic()
        down = subprocess.run(
            ["make", "-s", "down"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
        )
        down_seconds = time.monotonic() - began
        print(f"make down: {down_seconds:.1f} s")
        process.wait(timeout=60)
        stopped = "make down"
    finally:
        if stopped is None:  # the test failed: leave nothing running
            subprocess.run(["make", "-s", "down"], cwd=REPO, env=env, timeout=300, check=False)
            stop(process, tmp_path / "standalone.log")
        log.close()
    console = (tmp_path / "standalone.log").read_text(errors="replace")
    tail = "".join(console.splitlines(keepends=True)[-60:])
    return Standalone(
        config, env, port, run_state, bound, python_paths, down, down_seconds, group, tail, console
    )


def test_trigger_a_dag_over_the_rest_api(standalone: Standalone) -> None:
    assert standalone.run_state == "success", standalone.log_tail
    with Catalog.connect(standalone.config.catalog_url) as catalog:
        [saved] = catalog.list_savepoints("clicks")
        pinned = resolve_point(catalog, "clicks", "smoke")  # a pin: nothing copied
    assert saved.name == "smoke" and pinned.total_rows == 2


def test_documented_path_make_up_serves_airflow_on_loopback_only(standalone: Standalone) -> None:
    """The API server (the UI, the REST API) of ``make up`` listens on 127.0.0.1 only."""
    on_port = {host for host, port in standalone.bound if port == standalone.port}
    assert on_port == {"127.0.0.1"}, standalone.bound


def test_documented_path_make_down_stops_airflow_within_15_seconds(standalone: Standalone) -> None:
    """``make down`` after a DAG run: done within 15 s, Airflow stopped by its own SIGINT path
    (no SIGTERM to the group nor SIGKILL needed), and no process of it left (none in its process
    group, none with its AIRFLOW_HOME in its environment)."""
    down = standalone.down
    assert down.returncode == 0, down.stdout + down.stderr
    assert standalone.down_seconds < 15, (standalone.down_seconds, standalone.log_tail)
    assert "is stopped" in down.stderr, down.stderr
    # what the `make up` said as it stopped
    assert "Airflow stopped in" in standalone.log_tail, standalone.log_tail
    assert "still stopping after" not in standalone.log_tail, standalone.log_tail
    assert "killing" not in standalone.log_tail, standalone.log_tail
    with pytest.raises(ProcessLookupError):
        os.killpg(standalone.group, 0)
    assert processes_with(standalone.env["AIRFLOW_HOME"]) == [], standalone.log_tail
    assert not (Path(standalone.env["AIRFLOW_HOME"]) / "standalone.pid").exists()


def test_make_up_processes_freeze_their_heap_at_exit(standalone: Standalone) -> None:
    """Every Python process of ``make up`` loads ``scripts/airflow_exit/sitecustomize.py`` (first
    on its ``PYTHONPATH``), which skips the garbage collections of the interpreter's shutdown: the
    API server's took 4 s of ``make down``'s 7 s, and ``make down`` overran its grace under load."""
    folder = str(REPO / "scripts" / "airflow_exit")
    assert standalone.python_paths, "no process of the group was seen"
    assert {path.split(":")[0] for path in standalone.python_paths} == {folder}


def test_documented_path_make_up_console_has_no_deprecation_warning(standalone: Standalone) -> None:
    """Airflow 3.3 reads plugins/.airflowignore with pathspec's deprecated GitWildMatchPattern in
    each component and task: ``make up`` filters that one warning (PYTHONWARNINGS)."""
    assert "Airflow is up in" in standalone.console
    assert "GitWildMatchPattern" not in standalone.console
    assert "category=DeprecationWarning" not in standalone.console
