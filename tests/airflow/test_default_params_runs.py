"""Every DAG triggered with exactly its params' defaults (what the Trigger form submits
unchanged), on a home holding the demo's job, and the run's outcome the one its docs give.

``stateful_pipeline``'s defaults run in ``test_schedule.py`` and ``streaming_kafka``'s in
``tests/kafka/test_kafka_dag.py``; ``streaming_query``'s defaults start a query that runs until
``streaming_query_stop`` stops it (``test_streaming.py`` stops one), so it is not run here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from deltalake import DeltaTable

from jobs import clickstream
from statecore.catalog import Catalog, CheckpointStatus
from statecore.checkpoint.points import resolve_point
from statecore.config import StatecoreConfig
from statecore.ops.streams import NOT_STARTED
from tests.airflow.dagrun import run_dags
from tests.test_readme_examples import build_demo_home

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1800)]

DEMO_CHECKPOINTS = [20260101, 20260102, 20260103]
STREAM_JOB = "clickstream_stream"


def test_default_params_every_dag_runs_with_its_defaults(tmp_path: Path) -> None:
    home = build_demo_home(tmp_path)
    config = StatecoreConfig.resolve(home=str(home), env={})
    saved, maintained, rescaled, stopped, no_input = run_dags(
        home,
        [
            ("savepoint", {}),
            ("state_maintenance", {}),
            ("rescale", {}),
            ("streaming_query_stop", {}),
            ("streaming_pipeline", {}),
        ],
    )
    log = (home / "dag-runs.log").read_text()

    # savepoint: a pin on clickstream's latest checkpoint, named after the job, nothing copied
    assert saved["tasks"] == {"savepoint": "success"}
    savepoint = saved["xcom"]["savepoint"]
    assert savepoint["job"] == clickstream.JOB and savepoint["checkpoint_id"] == 20260103
    assert savepoint["name"].startswith(clickstream.JOB) and savepoint["rows"] > 0
    assert (savepoint["kind"], savepoint["path"]) == ("pin", None)
    with Catalog.connect(config.catalog_url) as catalog:
        pinned = resolve_point(catalog, clickstream.JOB, savepoint["name"])
    assert pinned.pinned and pinned.checkpoint_id == 20260103

    # state_maintenance: the job of the home (no Asset event: every listed job the catalog
    # has); retain 7 of 3 checkpoints expires none
    assert maintained["tasks"] == {
        "jobs": "success",
        "ttl_cleanup": "success",
        "retention": "success",
    }
    assert maintained["xcom"]["jobs"] == [clickstream.JOB]
    retention = maintained["xcom"]["retention"]
    assert retention["retained"] == DEMO_CHECKPOINTS and retention["expired"] == []

    # rescale: parallelism 2 on a job at parallelism 2 is a no-op, skipped before a savepoint
    assert rescaled["tasks"] == dict.fromkeys(
        ("validate", "savepoint", "rescale", "verify"), "skipped"
    )
    assert "no-op: job 'clickstream' is already at parallelism 2 and max parallelism 128" in log

    # streaming_query_stop: no query was started, so nothing to drain or stop
    assert stopped["tasks"] == {"drain": "success", "caught_up": "skipped", "stop": "success"}
    assert stopped["xcom"]["stop"]["state"] == NOT_STARTED
    assert "stream clickstream_query is NOT_STARTED: nothing to drain" in log
    assert "stream clickstream_query is NOT_STARTED: nothing to stop" in log

    # streaming_pipeline: no input folder yet, so skipped before Spark starts
    assert no_input["tasks"] == dict.fromkeys(("check", "increment", "checkpoints"), "skipped")
    assert f"no input at {home}/data/clickstream (yet)" in log

    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.get_job(clickstream.JOB).parallelism == 2
        completed = catalog.list_checkpoints(clickstream.JOB, status=CheckpointStatus.COMPLETED)
        assert [c.checkpoint_id for c in completed] == DEMO_CHECKPOINTS

    # ... and once the demo's three days are there, one increment takes them all as one
    # micro-batch (max_files_per_trigger: all), checkpoint 0 of clickstream_stream
    shutil.copytree(tmp_path / "in", home / "data" / "clickstream")
    [streamed] = run_dags(home, [("streaming_pipeline", {})], first_minute=5)
    assert streamed["tasks"] == dict.fromkeys(("check", "increment", "checkpoints"), "success")
    progress = streamed["xcom"]["checkpoints"]
    assert progress["completed"] == [0] and progress["state"] == "FINISHED"
    assert progress["processed_files"] == 3 and progress["lag_files"] == 0
    output = DeltaTable(str(home / "output" / STREAM_JOB)).to_pyarrow_table()
    assert output.num_rows == 3 * 600
