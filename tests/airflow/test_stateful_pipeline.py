"""The stateful_pipeline DAG on a real Airflow (SQLite): parsed, then run with dag.test()."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from statecore.catalog import Catalog, CheckpointStatus
from statecore.cli.demo import airflow_environment, generate_clickstream
from statecore.config import StatecoreConfig

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.airflow, pytest.mark.slow]

# Runs in its own interpreter so Airflow's configuration (read at import) is this test's only.
DAG_TEST = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.utils.db import initdb
import pendulum

initdb()
bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
dag = bag.get_dag("stateful_pipeline")
run = dag.test(logical_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
               run_conf={"parallelism": 2, "backend": "heap"})
tasks = sorted(bag.dags["stateful_pipeline"].task_ids)
print(json.dumps({"state": str(run.state), "tasks": tasks}))
"""


def test_dag_test_completes_a_checkpoint(tmp_path: Path) -> None:
    home = tmp_path / "home"
    generate_clickstream(home / "data" / "clickstream", days=1, users=20, events_per_day=100)
    env = airflow_environment(REPO, home)
    done = subprocess.run(
        [sys.executable, "-c", DAG_TEST, str(REPO / "dags")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"state": "success", "tasks": ["check", "clickstream"]}
    config = StatecoreConfig.resolve(home=str(home), env={})
    with Catalog.connect(config.catalog_url) as catalog:
        latest = catalog.latest_checkpoint("clickstream")
        assert latest is not None and latest.status is CheckpointStatus.COMPLETED
        assert latest.checkpoint_id == 20260101 and latest.parallelism == 2
        assert latest.total_rows > 0
    assert (home / "output" / "clickstream" / "date=2026-01-01").is_dir()
