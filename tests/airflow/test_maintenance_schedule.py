"""``state_maintenance`` maintains the job whose checkpoint triggered it: a completed checkpoint
of ``clickstream_kafka`` (an event of its Asset) makes an asset-triggered run, created by
Airflow's own scheduler code, that maintains ``clickstream_kafka`` and leaves ``clickstream``
(the job the DAG was once fixed to) as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from tests.airflow.assetrun import run_triggered
from tests.ops.statebuilder import Table, value_rows, write_checkpoint

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(900)]

CHECKPOINTS = list(range(1, 10))  # retention keeps 7 by default: 2 to expire


def test_own_query_maintenance_runs_on_the_asset_of_the_job_it_maintains(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = StatecoreConfig.resolve(home=str(home), env={})
    for job in ("clickstream", "clickstream_kafka"):
        for checkpoint_id in CHECKPOINTS:
            rows = value_rows({"u1": float(checkpoint_id), "u2": 2.0})
            write_checkpoint(config, job, checkpoint_id, {"total_amount": Table(rows)})

    run = run_triggered(home, "state_maintenance", ["statecore-clickstream_kafka"])

    assert run["run_type"] == "asset_triggered" and run["state"] == "success", run
    assert run["consumed"] == ["statecore-clickstream_kafka"]
    assert run["xcom"]["jobs"] == ["clickstream_kafka"]
    assert run["tasks"] == {
        "jobs": "success",
        "ttl_cleanup[0]": "success",
        "retention[0]": "success",
    }
    assert run["xcom"]["ttl_cleanup[0]"]["job"] == "clickstream_kafka"
    retention = run["xcom"]["retention[0]"]
    assert retention["job"] == "clickstream_kafka" and retention["expired"] == [1, 2]
    with Catalog.connect(config.catalog_url) as catalog:

        def statuses(job: str) -> list[CheckpointStatus]:
            return [c.status for c in catalog.list_checkpoints(job, with_tables=False)]

        assert (
            statuses("clickstream_kafka")
            == [CheckpointStatus.EXPIRED] * 2 + [CheckpointStatus.COMPLETED] * 7
        )
        assert statuses("clickstream") == [CheckpointStatus.COMPLETED] * 9  # not maintained
