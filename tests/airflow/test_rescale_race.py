"""The rescale DAG when a run of the job completes between its savepoint and its rescale.

A real Airflow (``dag.test()``) runs ``rescale`` past the max parallelism on the clickstream
job; the day-2 run of the job (a real Spark run, :mod:`tests.airflow.rescale_race`) completes
right after the DAG's savepoint task pinned day 1, before its rescale task. The rescale, under
the job's lease, pins day 2 and rewrites that: the DAG succeeds, and the job's new checkpoint
holds day 2's state, not day 1's (no run's checkpoint rewound).
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from statecore.catalog import Catalog
from statecore.checkpoint.points import RestorePoint, checkpoint_point
from statecore.cli.demo import generate_clickstream
from statecore.config import StatecoreConfig
from statecore.query.diff import checksums
from tests.airflow.dagrun import run_dags
from tests.airflow.ops_jobs import checkpoint_of, clickstream_day, run_steps
from tests.airflow.rescale_race import LOG_ENV, STEPS_ENV

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1200)]

DAY_1, DAY_2 = date(2026, 1, 1), date(2026, 1, 2)


def test_fenced_maintenance_rescale_dag_rescales_the_run_that_completed_after_its_savepoint(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    data = home / "data" / "clickstream"
    generate_clickstream(data, days=2, users=30, events_per_day=120)
    run_steps([clickstream_day(home, data, DAY_1, parallelism=2)], tmp_path / "day-1.log")
    between = [clickstream_day(home, data, DAY_2)]
    (step,) = run_dags(
        home,
        [("rescale", {"job": "clickstream", "parallelism": 3, "max_parallelism": 256})],
        listener="tests.airflow.rescale_race",
        extra_env={STEPS_ENV: json.dumps(between), LOG_ENV: str(tmp_path / "day-2.log")},
    )
    assert step["state"] == "success", step
    xcom = step["xcom"]
    # the savepoint task pinned day 1; day 2's run completed before the rescale task, which
    # pinned day 2 and rewrote that one
    assert xcom["savepoint"]["checkpoint_id"] == checkpoint_of(DAY_1)
    assert xcom["rescale"]["savepoint_checkpoint_id"] == checkpoint_of(DAY_2)
    assert xcom["rescale"]["savepoint"] != xcom["savepoint"]["name"]
    assert xcom["verify"]["checkpoint_id"] == xcom["rescale"]["checkpoint_id"]
    config = StatecoreConfig.resolve(home=str(home), env={})
    with Catalog.connect(config.catalog_url) as catalog:
        assert {s.name for s in catalog.list_savepoints("clickstream")} >= {
            xcom["savepoint"]["name"],
            xcom["rescale"]["savepoint"],
        }
        job = catalog.get_job("clickstream")
        assert (job.parallelism, job.max_parallelism) == (3, 256)
        rescaled = checkpoint_point(catalog, "clickstream")
        assert rescaled.checkpoint_id == xcom["rescale"]["checkpoint_id"]
        day_2 = checkpoint_point(catalog, "clickstream", checkpoint_of(DAY_2))
        day_1 = checkpoint_point(catalog, "clickstream", checkpoint_of(DAY_1))

    def totals(point: RestorePoint) -> dict[str, tuple[int, int | None, str]]:
        return {
            f"{c.operator}/{c.table_kind}/{c.state}": (c.rows, c.keys, c.checksum)
            for c in checksums(point)
        }

    # the rescaled state is day 2's (nothing of that run lost), not day 1's (rewound)
    assert totals(rescaled) == totals(day_2) != totals(day_1)
