"""``stateful_pipeline`` keeps the job's days in order on a real Airflow (``dag.test()``, real
Spark, a real catalog), and waits for maintenance as maintenance waits for runs (issue 40).

- A day after a failed day is refused by its ``check`` task, once (no retry: the gap does not
  close by waiting), naming the missing day and the skip command; the day skipped on purpose
  with its reason, the same run succeeds.
- A run whose ``check`` passed while a maintenance operation (a real lease, as ``ttl-cleanup``
  holds it, from :mod:`tests.airflow.rescale_race`) holds the job waits for it and completes,
  where it failed with ``MaintenanceLockedError`` before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus
from statecore.cli.demo import generate_clickstream
from statecore.config import StatecoreConfig
from tests.airflow.dagrun import run_dags
from tests.airflow.rescale_race import AFTER_ENV, AS_ENV, HOLD_ENV, JOB_ENV, UNTIL_ENV

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(900)]

JOB = "clickstream"


def _home(tmp_path: Path, days: int) -> tuple[Path, StatecoreConfig]:
    home = tmp_path / "home"
    generate_clickstream(home / "data" / "clickstream", days=days, users=20, events_per_day=60)
    return home, StatecoreConfig.resolve(home=str(home), env={})


def test_day_order_dag_refuses_the_day_after_a_failed_day_until_it_is_skipped(
    tmp_path: Path,
) -> None:
    home, config = _home(tmp_path, 3)
    (first,) = run_dags(home, [("stateful_pipeline", {"date": "2026-01-01"})])
    assert first["tasks"] == {"check": "success", "clickstream": "success"}, first
    with Catalog.connect(config.catalog_url) as catalog:  # day 2's run failed for good
        catalog.begin_checkpoint(
            JOB, 20260102, kind=CheckpointKind.CHECKPOINT, parallelism=2, max_parallelism=128
        )
        catalog.fail_checkpoint(JOB, 20260102, error="the Spark job died")
    (third,) = run_dags(
        home, [("stateful_pipeline", {"date": "2026-01-03"})], first_minute=1, allow_failure=True
    )
    assert third["state"] == "failed", third
    assert third["tasks"]["check"] == "failed", third
    log = (home / "dag-runs.log").read_text()
    assert "would leave 2026-01-02 out of its state for good" in log, log[-3000:]
    assert "statecore checkpoints skip clickstream 20260102" in log
    assert log.count("Task failed with exception") == 1, "the gap is not retried"
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.highest_completed_id(JOB) == 20260101
        catalog.skip_checkpoint(JOB, 20260102, reason="the day's input is test data")
    # run again on an Airflow database of its own: on the first one, depends_on_past holds the
    # next run until the failed run is cleared or marked successful (the make up tests do that)
    (again,) = run_dags(
        home, [("stateful_pipeline", {"date": "2026-01-03"})], airflow_home=tmp_path / "again"
    )
    assert again["tasks"] == {"check": "success", "clickstream": "success"}, again
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.checkpoint_status(JOB, 20260103) is CheckpointStatus.COMPLETED
        assert catalog.checkpoint_status(JOB, 20260102) is CheckpointStatus.FAILED


def test_day_order_dag_job_run_waits_for_maintenance_holding_the_job(tmp_path: Path) -> None:
    home, config = _home(tmp_path, 2)
    steps = run_dags(
        home,
        [
            ("stateful_pipeline", {"date": "2026-01-01"}),
            ("stateful_pipeline", {"date": "2026-01-02"}),
        ],
        listener="tests.airflow.rescale_race",
        extra_env={
            AFTER_ENV: "stateful_pipeline.check",
            AS_ENV: "ttl-cleanup",
            JOB_ENV: JOB,
            # held until the run says it waits (at most 240 s: a spark-submit reaches the lease
            # in 15 s on a quiet machine, in over 40 s on a loaded one)
            HOLD_ENV: "240",
            UNTIL_ENV: str(home / "airflow" / "logs"),
        },
    )
    assert [s["state"] for s in steps] == ["success", "success"], steps
    log = (home / "dag-runs.log").read_text()
    assert "run 20260102 waits up to 0:10:00 for the lease" in log, log[-3000:]
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.highest_completed_id(JOB) == 20260102
        assert catalog.maintenance_lock(JOB) is None
