"""``make up``'s own Airflow (scripts/airflow_up) as a user runs it: on its PostgreSQL, driven
with the documented ``make airflow ARGS='...'``, across a ``make down`` / ``make up`` and a
scheduler killed with SIGKILL; one home for the module's tests, two starts.

The fixture, in order: ``make up``; ``make airflow ARGS='config get-value database
sql_alchemy_conn'`` and ``ARGS='dags list'``; docs/airflow.md's backfill block, as written: its
backfill (7 days of ``stateful_pipeline``, paused: its runs stay queued; no input, so each
run's ``check`` skips it and the run succeeds without Spark); ``make down``; ``make up`` again;
the block's unpause; every run waited for; the scheduler killed with SIGKILL and a run
triggered once the supervisor restarted it; ``make down``, timed.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from statecore.cli.demo import airflow_environment
from tests.airflow.dagrun import REPO
from tests.airflow.test_standalone import Api, free_port, processes_with, stop
from tests.listening import group_pids

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

START_TIMEOUT = 420
RUNS_TIMEOUT = 600
MARK = "test_backfill_documented_command_creates_the_runs -->\n```bash\n"


def documented_commands() -> list[list[str]]:
    """The lines of docs/airflow.md's backfill block (``make airflow ARGS='backfill create ...'``,
    ``make airflow ARGS='dags unpause stateful_pipeline'``), split as a shell splits them."""
    block = (REPO / "docs" / "airflow.md").read_text().split(MARK)[1].split("```")[0]
    return [shlex.split(line) for line in block.splitlines()]


@dataclass
class OwnAirflow:
    env: dict[str, str]
    database_url: subprocess.CompletedProcess[str]
    dags_list: subprocess.CompletedProcess[str]
    backfill: subprocess.CompletedProcess[str]
    queued_before_restart: dict[str, str]
    after_restart: dict[str, str]
    killed_scheduler: int
    run_after_kill: str
    down: subprocess.CompletedProcess[str]
    down_seconds: float
    group: int
    consoles: list[str]

    @property
    def home(self) -> Path:
        return Path(self.env["AIRFLOW_HOME"])


def make_airflow(env: dict[str, str], args: str) -> subprocess.CompletedProcess[str]:
    """``make airflow ARGS='...'``, as docs/airflow.md writes it."""
    return run(env, ["make", "-s", "airflow", f"ARGS={args}"])


def run(env: dict[str, str], command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


class Up:
    """One ``make up`` in the background, its console in ``log``."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.out = log.open("wb")
        self.process = subprocess.Popen(
            ["make", "-s", "up"],
            cwd=REPO,
            env=env,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.api = Api(int(env["AIRFLOW__API__PORT"]))
        self.api.wait(
            "the API server",
            lambda: self.api.call("GET", "/api/v2/monitor/health"),
            START_TIMEOUT,
            self.process,
        )
        passwords = Path(env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
        password = json.loads(passwords.read_text())["admin"]
        token = self.api.call("POST", "/auth/token", {"username": "admin", "password": password})
        self.api.token = token["access_token"]

    @property
    def group(self) -> int:
        return int((Path(self.env["AIRFLOW_HOME"]) / "standalone.pid").read_text().split()[1])

    def console(self) -> str:
        return self.log.read_text(errors="replace")

    def runs(self) -> dict[str, str]:
        found = self.api.call("GET", "/api/v2/dags/stateful_pipeline/dagRuns?limit=100")
        return {run["dag_run_id"]: run["state"] for run in found["dag_runs"]}

    def wait_runs_done(self) -> dict[str, str]:
        def done() -> dict[str, str] | None:
            runs = self.runs()
            finished = all(state in ("success", "failed") for state in runs.values())
            return runs if runs and finished else None

        result: dict[str, str] = self.api.wait("the runs", done, RUNS_TIMEOUT, self.process)
        return result

    def down(self) -> tuple[subprocess.CompletedProcess[str], float]:
        began = time.monotonic()
        down = subprocess.run(
            ["make", "-s", "down"], cwd=REPO, env=self.env, capture_output=True, text=True
        )
        seconds = time.monotonic() - began
        self.process.wait(timeout=60)
        self.out.close()
        return down, seconds


def scheduler_pid(group: int) -> int:
    for pid in group_pids(group):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
        if b"scheduler" in cmdline and parent == str(group):  # not a LocalExecutor worker
            return pid
    raise AssertionError(f"no scheduler in process group {group}")


@pytest.fixture(scope="module")
def own_airflow(up_tmp: Path) -> OwnAirflow:
    tmp_path = up_tmp
    env = airflow_environment(REPO, tmp_path / "home")
    env.pop("AIRFLOW__API__HOST", None)  # the Makefile's default: loopback
    # airflow_environment's SQLite URL stays: make up and make airflow use their PostgreSQL anyway
    env.update(
        {
            "AIRFLOW__API__PORT": str(free_port()),
            # the scheduler's and triggerer's log servers (8793, 8794 by default, on every
            # interface): ports of their own, as another Airflow of the suite may run beside
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        }
    )
    up: Up | None = None
    consoles = []
    try:
        up = Up(env, tmp_path / "up1.log")
        first = up
        up.api.wait(
            "stateful_pipeline to be parsed",
            lambda: first.api.call("GET", "/api/v2/dags/stateful_pipeline"),
            START_TIMEOUT,
            up.process,
        )
        database_url = make_airflow(env, "config get-value database sql_alchemy_conn")
        dags_list = make_airflow(env, "dags list")
        backfill_command, unpause_command = documented_commands()
        backfill = run(env, backfill_command)
        queued = up.runs()
        up.down()
        consoles.append(up.console())
        up = Up(env, tmp_path / "up2.log")
        unpause = run(env, unpause_command)
        assert unpause.returncode == 0, unpause.stdout + unpause.stderr
        after_restart = up.wait_runs_done()
        killed = scheduler_pid(up.group)
        os.kill(killed, signal.SIGKILL)
        second = up
        up.api.wait(
            "the scheduler's restart",
            lambda: "restarting the scheduler" in second.console(),
            120,
            up.process,
        )
        triggered = up.api.call(
            "POST",
            "/api/v2/dags/stateful_pipeline/dagRuns",
            {"logical_date": "2026-02-01T00:00:00Z", "conf": {}},
        )
        path = f"/api/v2/dags/stateful_pipeline/dagRuns/{triggered['dag_run_id']}"

        def finished() -> str | None:
            state: Any = second.api.call("GET", path)["state"]
            return state if state in ("success", "failed") else None

        run_after_kill = up.api.wait("the run after the kill", finished, RUNS_TIMEOUT, up.process)
        group = up.group
        down, down_seconds = up.down()
        consoles.append(up.console())
        up = None
    finally:
        if up is not None:  # the test failed: leave nothing running
            subprocess.run(["make", "-s", "down"], cwd=REPO, env=env, timeout=300, check=False)
            stop(up.process, up.log)
            print(up.console()[-5000:])
    return OwnAirflow(
        env, database_url, dags_list, backfill, queued, after_restart, killed, run_after_kill,
        down, down_seconds, group, consoles,
    )  # fmt: skip


def test_own_airflow_metadata_database_is_make_ups_postgresql(own_airflow: OwnAirflow) -> None:
    """make up's Airflow runs on PostgreSQL over a Unix socket in ``$AIRFLOW_HOME/postgres``."""
    url = own_airflow.database_url
    assert url.returncode == 0, url.stderr
    assert url.stdout.strip().startswith("postgresql+psycopg2://"), url.stdout
    assert f"host={own_airflow.home / 'postgres'}" in url.stdout, url.stdout
    assert (own_airflow.home / "postgres" / "PG_VERSION").exists()
    assert not (own_airflow.home / "airflow.db").exists()  # no SQLite of make up's


def test_own_airflow_cli_as_documented_lists_the_dags(own_airflow: OwnAirflow) -> None:
    listed = own_airflow.dags_list
    assert listed.returncode == 0, listed.stderr
    assert "stateful_pipeline" in listed.stdout and "savepoint" in listed.stdout


def test_backfill_documented_command_creates_the_runs(own_airflow: OwnAirflow) -> None:
    backfill = own_airflow.backfill
    assert backfill.returncode == 0, backfill.stdout + backfill.stderr
    assert "database is locked" not in backfill.stdout + backfill.stderr
    days = {f"backfill__2026-01-0{day}T00:00:00+00:00" for day in range(1, 8)}
    assert days <= set(own_airflow.queued_before_restart), own_airflow.queued_before_restart
    assert {own_airflow.queued_before_restart[run] for run in days} == {"queued"}


def test_backfill_runs_all_complete_after_restart_none_fails(own_airflow: OwnAirflow) -> None:
    """The runs queued when ``make down`` stopped Airflow survive it (the database is kept) and
    all succeed after ``make up``: no task starts before the API server answers."""
    runs = own_airflow.after_restart
    assert set(own_airflow.queued_before_restart) <= set(runs), runs
    assert set(runs.values()) == {"success"}, runs


def test_backfill_keeps_the_scheduler_alive(own_airflow: OwnAirflow) -> None:
    first, second = own_airflow.consoles
    before_kill = first + second.split("died: killed by SIGKILL")[0]
    assert "died" not in before_kill, before_kill[-3000:]
    for log in (own_airflow.home / "logs" / "make_up").glob("*.log"):
        text = log.read_text(errors="replace")
        assert "database is locked" not in text and "StaleDataError" not in text, log


def test_restart_of_a_killed_scheduler_is_loud_and_runs_then_finish(
    own_airflow: OwnAirflow,
) -> None:
    second = own_airflow.consoles[1]
    assert f"the scheduler (pid {own_airflow.killed_scheduler}) died: killed by SIGKILL" in second
    assert "restarting the scheduler (restart 1 of at most 5 in 10 minutes)" in second
    after = second.split("restarting the scheduler")[1]
    assert "address already in use" not in after, after[:3000]  # its log server was stopped
    assert own_airflow.run_after_kill == "success"


def test_own_airflow_console_is_quiet(own_airflow: OwnAirflow) -> None:
    """No access log, no INFO of the components: the supervisor's lines, warnings and errors."""
    for console in own_airflow.consoles:
        assert "HTTP/1.1" not in console and '"GET /' not in console, console[-3000:]
        relayed = [line for line in console.splitlines() if "statecore: !!!" not in line]
        assert not [line for line in relayed if "[info" in line], console[-3000:]
        assert "Airflow is up in" in console
        assert len(console.splitlines()) < 200, console[-3000:]


def test_restart_make_down_stops_airflow_and_its_postgresql(own_airflow: OwnAirflow) -> None:
    down = own_airflow.down
    assert down.returncode == 0, down.stdout + down.stderr
    assert own_airflow.down_seconds < 15, own_airflow.consoles[1][-3000:]
    assert "still stopping after" not in own_airflow.consoles[1]
    assert "still running after" not in own_airflow.consoles[1]  # nothing needed SIGKILL
    with pytest.raises(ProcessLookupError):
        os.killpg(own_airflow.group, 0)
    assert processes_with(str(own_airflow.home)) == []
    assert not (own_airflow.home / "postgres" / "postmaster.pid").exists()  # a clean shutdown
