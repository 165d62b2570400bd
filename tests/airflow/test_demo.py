"""``make demo`` as a newcomer runs it (``statecore demo``: Airflow's ``dags test`` of
``stateful_pipeline`` per day, on a fresh home), then the next step of docs/airflow.md: one more
day of sample input (``statecore demo --day``) and a run of the pipeline for it."""

from __future__ import annotations

import sqlite3
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from statecore.catalog import Catalog, CheckpointStatus
from statecore.cli.demo import airflow_environment
from statecore.config import StatecoreConfig
from tests.airflow.dagrun import REPO, run_dags

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1800)]


def statecore(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["statecore", *args],
        cwd=REPO,
        env=airflow_environment(REPO, home),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_demo_then_one_more_day(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = statecore(home, "demo", "--days", "1", "--project", str(REPO))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "$ statecore checkpoints list" in done.stdout and "20260101" in done.stdout
    # it ends with what to try next, on the checkpoint it made (tests/cli/test_demo_next_steps.py)
    assert "statecore checkpoints show clickstream 20260101 --key-groups" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].lstrip().startswith("make up")

    # the run shows its real duration in the UI (it once showed the months since its date)
    with sqlite3.connect(home / "airflow" / "airflow.db") as db:
        runs = db.execute("SELECT start_date, end_date FROM dag_run").fetchall()
    assert len(runs) == 1
    [(start, end)] = runs
    duration = datetime.fromisoformat(end) - datetime.fromisoformat(start)
    assert 0 < duration.total_seconds() < 3600

    added = statecore(home, "demo", "--day", "2026-01-02")
    assert added.returncode == 0, added.stderr
    assert 'Trigger stateful_pipeline with {"date": "2026-01-02"}' in added.stdout
    again = statecore(home, "demo", "--day", "2026-01-02")
    assert again.returncode == 2 and "already there" in again.stderr
    assert (home / "data" / "clickstream" / "date=2026-01-02" / "events.parquet").is_file()

    [run] = run_dags(home, [("stateful_pipeline", {"date": "2026-01-02"})])
    assert run["tasks"] == {"check": "success", "clickstream": "success"}
    config = StatecoreConfig.resolve(home=str(home), env={})
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.get_checkpoint("clickstream", 20260102).status is (
            CheckpointStatus.COMPLETED
        )
