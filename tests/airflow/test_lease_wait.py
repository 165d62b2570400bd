"""A maintenance DAG task that finds a run of the job holding its lease waits for it.

A real Airflow (``dag.test()``) runs ``rescale`` (within the max parallelism) on a job; right
after its savepoint task, a run of the job takes the job's lease and holds it for a few seconds
(:mod:`tests.airflow.rescale_race`). The rescale task, which the operators' ``lease_wait``
(10 minutes by default) lets wait for the lease, rescales once the run let go: the DAG succeeds
instead of failing on ``ConcurrentRunError``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from tests.airflow.dagrun import run_dags
from tests.airflow.rescale_race import HOLD_ENV, JOB_ENV
from tests.ops.statebuilder import Table, value_rows, write_checkpoint

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(900)]


def test_fenced_maintenance_rescale_dag_waits_for_the_run_holding_the_job(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = StatecoreConfig.resolve(home=str(home), env={})
    write_checkpoint(config, "clicks", 1, {"total": Table(value_rows({"a": 1.0, "b": 2.0}))})
    (step,) = run_dags(
        home,
        [("rescale", {"job": "clicks", "parallelism": 3})],
        listener="tests.airflow.rescale_race",
        extra_env={HOLD_ENV: "6", JOB_ENV: "clicks"},
        allow_failure=True,
    )
    assert step["state"] == "success", step
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.get_job("clicks").parallelism == 3
        assert catalog.maintenance_lock("clicks") is None  # the run and the rescale let go
    log = (home / "dag-runs.log").read_text()
    assert "rescale waits up to 0:10:00 for the lease" in log, log[-3000:]
