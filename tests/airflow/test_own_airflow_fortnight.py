"""A compressed fortnight on ``make up``'s own Airflow (issue 40): its PostgreSQL, its
supervisor, its parallelism and the bundled DAGs as they are, driven only as docs/airflow.md
says (``make airflow ARGS='...'``, the REST API a user's browser calls); the only settings of
the test's own compress time (a 5 s retry delay, DAGs parsed every 5 s, created paused).

Fourteen days of ``stateful_pipeline`` with input on six of them, and ``state_maintenance``
unpaused, so the checkpoint each run completes triggers maintenance of the job while the next
day's run starts (a run waits for maintenance's lease, maintenance for a run's):

1. the documented backfill of days 1 to 7; day 5's input is broken (not Parquet), so its Spark
   task fails on every try, and the scheduler is SIGKILLed once day 1 completed, while the next
   days' runs run (the supervisor restarts it);
2. the failed day blocks the later days (``depends_on_past``, ``wait_for_downstream``): no
   checkpoint after day 3 while it stays failed;
3. the input mended, the failed day cleared with docs/airflow.md's command as written
   (``make airflow ARGS='tasks clear ...'``, that day only); it runs, and the later days follow
   in order;
4. the backfill of days 8 to 14 created, then ``make down`` and ``make up`` with its runs
   queued: they run after the restart.

Then: every day with input is in the state exactly once, in day order (each checkpoint
completed after the one before it, none failed but the broken day's tries); every input event
is in the output table exactly once (DuckDB); every run ended well.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus
from statecore.cli.demo import airflow_environment
from statecore.config import StatecoreConfig
from tests.airflow.dagrun import REPO
from tests.airflow.month import input_rows, lay_out_input
from tests.airflow.test_own_airflow import Up, make_airflow, run, scheduler_pid
from tests.airflow.test_standalone import free_port, stop

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.weeks,
    pytest.mark.fortnight,
    pytest.mark.slow,
    pytest.mark.timeout(2400),
]

FIRST = date(2026, 1, 1)
DAYS = 14
WITH_INPUT = (1, 3, 5, 6, 9, 13)
BROKEN = 5
CLEAR_MARK = "test_own_airflow_fortnight_day_order_failed_day_blocks_later_days -->\n```bash\n"
WAIT = 1200.0
JOB = "clickstream"


def day(n: int) -> date:
    return FIRST + timedelta(days=n - 1)


@dataclass
class Fortnight:
    home: Path
    runs: dict[str, dict[str, Any]]
    blocked_checkpoints: list[int]
    blocked_runs: dict[str, dict[str, Any]]
    maintenance: dict[str, dict[str, Any]]
    clear: str
    killed_scheduler: int
    consoles: list[str]
    inputs: set[tuple[Any, ...]]


def documented_clear() -> list[list[str]]:
    """docs/airflow.md's block that clears a failed day (2026-01-05), split as a shell does."""
    block = (REPO / "docs" / "airflow.md").read_text().split(CLEAR_MARK)[1].split("```")[0]
    return [shlex.split(line) for line in block.splitlines()]


def wait_for(what: str, check: Callable[[], Any], up: Up, timeout: float = WAIT) -> Any:
    found: Any = up.api.wait(what, check, timeout, up.process)
    return found


def runs_of(up: Up, dag_id: str = "stateful_pipeline") -> dict[str, dict[str, Any]]:
    """Each run of ``dag_id`` by its logical day (or run id): state and the check's state."""
    found = up.api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=200&order_by=logical_date")
    return {
        (r["logical_date"] or r["dag_run_id"])[:10]: {"state": r["state"], "id": r["dag_run_id"]}
        for r in found["dag_runs"]
    }


def completed(config: StatecoreConfig) -> list[int]:
    with Catalog.connect(config.catalog_url) as catalog:
        if not catalog.has_job(JOB):
            return []
        return [
            c.checkpoint_id
            for c in catalog.list_checkpoints(JOB, with_tables=False, with_sizes=False)
            if c.kind is CheckpointKind.CHECKPOINT and c.status is CheckpointStatus.COMPLETED
        ]


@pytest.fixture(scope="module")
def fortnight(up_tmp: Path) -> Fortnight:
    tmp_path = up_tmp
    home = tmp_path / "home"
    config = StatecoreConfig.resolve(home=str(home), env={})
    folders = lay_out_input(home, [day(n) for n in WITH_INPUT], users=15, events=40)
    inputs = input_rows(folders)
    broken = folders[day(BROKEN)]
    good = {f.name: f.read_bytes() for f in broken.iterdir()}
    for f in broken.iterdir():
        f.write_text("not parquet")  # the day's input arrived broken
    env = airflow_environment(REPO, home)
    env.pop("AIRFLOW__API__HOST", None)
    env.update(
        {
            "AIRFLOW__API__PORT": str(free_port()),
            # the scheduler's and triggerer's log servers (8793, 8794 by default, on every
            # interface): ports of their own, as another Airflow of the suite may run beside
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5",
        }
    )
    up: Up | None = None
    consoles: list[str] = []
    try:
        up = Up(env, tmp_path / "up1.log")
        first = up
        wait_for("the DAGs", lambda: first.api.call("GET", "/api/v2/dags/state_maintenance"), up)
        for args in (
            "dags unpause state_maintenance",
            f"backfill create --dag-id stateful_pipeline --from-date {day(1)} --to-date {day(7)} "
            "--reprocess-behavior failed",
            "dags unpause stateful_pipeline",
        ):
            done = make_airflow(env, args)
            assert done.returncode == 0, done.stdout + done.stderr
        # a scheduler killed once day 1 completed, the next days' runs running: the supervisor
        # starts it again
        wait_for("day 1's checkpoint", lambda: completed(config), up)
        killed = scheduler_pid(up.group)
        os.kill(killed, signal.SIGKILL)
        # the broken day fails (its tries all fail) and blocks the days after it
        wait_for(
            "the broken day to fail",
            lambda: runs_of(first).get(str(day(BROKEN)), {}).get("state") == "failed",
            up,
        )
        time.sleep(30)  # time enough for a later day to run, were it not blocked
        blocked_checkpoints = completed(config)
        blocked_runs = runs_of(up)
        # mended and cleared as docs/airflow.md says: the failed day runs, the later days follow
        for name, data in good.items():
            (broken / name).write_bytes(data)
        (clear_command,) = documented_clear()
        clear = run(env, clear_command)
        assert clear.returncode == 0, clear.stdout + clear.stderr
        wait_for(
            "days 4 to 7",
            lambda: all(
                runs_of(first).get(str(day(n)), {}).get("state") == "success" for n in range(1, 8)
            ),
            up,
        )
        # Airflow marks a backfill complete up to 30 s after its last run: until then it refuses
        # another of the DAG ("There can be only one running backfill per Dag")
        deadline = time.monotonic() + 180
        while True:
            backfill = make_airflow(
                env,
                f"backfill create --dag-id stateful_pipeline --from-date {day(8)} "
                f"--to-date {day(DAYS)} --reprocess-behavior failed",
            )
            if "Another backfill is running" not in backfill.stderr + backfill.stdout:
                break
            assert time.monotonic() < deadline, "the first backfill never completed"
            time.sleep(10)
        assert backfill.returncode == 0, backfill.stdout + backfill.stderr
        up.down()
        consoles.append(up.console())
        up = Up(env, tmp_path / "up2.log")
        second = up
        wait_for(
            "the fortnight",
            lambda: (
                all(
                    runs_of(second).get(str(day(n)), {}).get("state") == "success"
                    for n in range(1, DAYS + 1)
                )
                and all(
                    r["state"] in ("success", "failed")
                    for r in runs_of(second, "state_maintenance").values()
                )
            ),
            up,
        )
        runs = runs_of(up)
        maintenance = runs_of(up, "state_maintenance")
        up.down()
        consoles.append(up.console())
        up = None
    finally:
        if up is not None:  # the test failed: leave nothing running
            import subprocess

            subprocess.run(["make", "-s", "down"], cwd=REPO, env=env, timeout=300, check=False)
            stop(up.process, up.log)
            print(up.console()[-5000:])
    return Fortnight(
        home, runs, blocked_checkpoints, blocked_runs, maintenance, clear.stdout, killed,
        consoles, inputs,
    )  # fmt: skip


def test_own_airflow_fortnight_has_every_day_in_the_state_once_in_order(
    fortnight: Fortnight,
) -> None:
    config = StatecoreConfig.resolve(home=str(fortnight.home), env={})
    expected = [int(day(n).strftime("%Y%m%d")) for n in WITH_INPUT]
    with Catalog.connect(config.catalog_url) as catalog:
        checkpoints = [
            c
            for c in catalog.list_checkpoints(JOB, with_tables=False, with_sizes=False)
            if c.kind is CheckpointKind.CHECKPOINT
        ]
        done = [c for c in checkpoints if c.status is CheckpointStatus.COMPLETED]
        assert [c.checkpoint_id for c in done] == expected
        by_completion = sorted(done, key=lambda c: c.completed_at)
        assert [c.checkpoint_id for c in by_completion] == expected  # in day order
        others = {c.checkpoint_id: c.status for c in checkpoints if c not in done}
        assert set(others) <= {int(day(BROKEN).strftime("%Y%m%d"))}, others


def test_own_airflow_fortnight_day_order_failed_day_blocks_later_days(
    fortnight: Fortnight,
) -> None:
    """Until it is cleared (docs/airflow.md's command, as written), the failed day keeps the
    later days from running."""
    assert day(BROKEN) == date(2026, 1, 5)  # the docs' day
    before = [int(day(n).strftime("%Y%m%d")) for n in WITH_INPUT if n < BROKEN]
    assert fortnight.blocked_checkpoints == before
    later = [fortnight.blocked_runs.get(str(day(n)), {}).get("state") for n in range(6, 8)]
    assert "success" not in later, fortnight.blocked_runs


def test_own_airflow_fortnight_output_has_every_event_once(fortnight: Fortnight) -> None:
    import duckdb

    con = duckdb.connect()
    con.execute("INSTALL delta; LOAD delta")
    table = fortnight.home / "output" / f"{JOB}_events"
    rows = con.execute(f"SELECT user_id, epoch_us(ts) FROM delta_scan('{table}')").fetchall()
    assert len(rows) == len(set(rows)), "an event twice in the output"
    assert set(rows) == fortnight.inputs


def test_own_airflow_fortnight_every_run_ended_well(fortnight: Fortnight) -> None:
    days = {str(day(n)) for n in range(1, DAYS + 1)}
    assert days <= set(fortnight.runs), fortnight.runs
    assert {fortnight.runs[d]["state"] for d in days} == {"success"}, fortnight.runs


def test_restart_fortnight_scheduler_killed_and_make_up_restarted(fortnight: Fortnight) -> None:
    first, second = fortnight.consoles
    assert f"the scheduler (pid {fortnight.killed_scheduler}) died" in first
    assert "restarting the scheduler" in first
    assert "Airflow is up in" in second


def test_backfill_fortnight_maintenance_ran_beside_the_runs(fortnight: Fortnight) -> None:
    """The checkpoints triggered maintenance (their Asset), which ran beside the next days'
    runs: every maintenance run and every job run ended well (neither failed on the other's
    lease)."""
    assert len(fortnight.maintenance) >= 2, fortnight.maintenance
    states = {r["state"] for r in fortnight.maintenance.values()}
    assert states == {"success"}, json.dumps(fortnight.maintenance)
