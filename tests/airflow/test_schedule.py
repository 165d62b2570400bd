"""``stateful_pipeline`` as its schedule and its users run it, without Spark: a scheduled run for
a day whose input is not there is skipped with the reason in its log (never failed, so unpausing
the DAG fails nothing); a run for a day already checkpointed is a no-op that says so; a
parallelism that a complete checkpoint cannot take is refused, not ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.ops.runs import RUN, SKIP, plan_batch_run
from tests.airflow.dagrun import run_dags
from tests.ops.statebuilder import Table, value_rows, write_checkpoint

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1800)]

SKIPPED = {"check": "skipped", "clickstream": "skipped"}


def test_schedule_skips_days_without_input_and_marks_no_op_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = StatecoreConfig.resolve(home=str(home), env={})
    # the scheduled run of 2026-02-01 (the runner's logical date) on a fresh home: no input
    [scheduled] = run_dags(home, [("stateful_pipeline", {})])
    assert scheduled["state"] == "success" and scheduled["tasks"] == SKIPPED
    log = (home / "dag-runs.log").read_text()
    assert f"no input at {home}/data/clickstream/date=2026-02-01" in log

    # a day already checkpointed (at parallelism 2): a no-op, marked as one
    write_checkpoint(
        config, "clickstream", 20260201, {"total_amount": Table(value_rows({"u": 1.0}))}
    )
    (home / "data" / "clickstream" / "date=2026-02-01").mkdir(parents=True)
    [noop] = run_dags(home, [("stateful_pipeline", {"date": "2026-02-01"})], first_minute=1)
    assert noop["tasks"] == SKIPPED
    assert "no-op: checkpoint 20260201 of clickstream is already complete" in (
        (home / "dag-runs.log").read_text()
    )

    # ... and asked to redo it at another parallelism, the run fails saying why
    [refused] = run_dags(
        home,
        [("stateful_pipeline", {"date": "2026-02-01", "parallelism": 5})],
        first_minute=2,
        allow_failure=True,
    )
    assert refused["state"] == "failed" and refused["tasks"]["check"] == "failed"
    assert "cannot apply to it; rescale the job" in (home / "dag-runs.log").read_text()
    with Catalog.connect(config.catalog_url) as catalog:  # nothing was changed
        assert catalog.get_checkpoint("clickstream", 20260201).status is (
            CheckpointStatus.COMPLETED
        )


def test_schedule_plan_of_a_batch_run(tmp_path: Path) -> None:
    config = StatecoreConfig.resolve(home=str(tmp_path / "home"), env={})
    write_checkpoint(config, "clickstream", 1, {"total_amount": Table(value_rows({"u": 1.0}))})
    with Catalog.connect(config.catalog_url) as catalog:
        fresh = plan_batch_run(catalog, job="other", checkpoint_id=1, input_uri=str(tmp_path))
        assert fresh.action == RUN
        missing = plan_batch_run(
            catalog, job="clickstream", checkpoint_id=2, input_uri=str(tmp_path / "nope")
        )
        assert missing.action == SKIP and "no input at" in missing.reason
        done = plan_batch_run(catalog, job="clickstream", checkpoint_id=1, parallelism=None)
        assert done.action == SKIP and done.reason.startswith("no-op")
        same = catalog.get_checkpoint("clickstream", 1).parallelism
        assert plan_batch_run(
            catalog, job="clickstream", checkpoint_id=1, parallelism=same
        ).reason.startswith("no-op")
