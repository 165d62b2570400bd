"""The maintenance operators' ``execute`` with their templated fields as Airflow renders them:
a param left empty in the Trigger form renders as the text ``"None"``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statecore.cli.demo import airflow_environment
from statecore.snapshot.log import LOG_GRACE
from tests.airflow.dagrun import REPO

pytestmark = pytest.mark.airflow

EXECUTE = """
import json, sys
from contextlib import contextmanager

sys.path.insert(0, sys.argv[1])
import statecore.ops.retention as retention
from statecore_airflow import RetentionOperator

calls = []


class Report:
    def to_dict(self):
        return {}


def apply_retention(
    config, catalog, job, *, retain, dry_run, vacuum_after, log_grace, outputs, progress
):
    hours = None if vacuum_after is None else vacuum_after.total_seconds() / 3600
    calls.append({"job": job, "retain": retain, "dry_run": dry_run, "vacuum_hours": hours,
                  "log_grace": log_grace.total_seconds(), "outputs": outputs})
    return Report()


class Hook:  # no connection, no catalog: execute's own logic only
    def get_config(self):
        from statecore.config import StatecoreConfig

        return StatecoreConfig.resolve(home="/nonexistent/statecore-home", env={})

    @contextmanager
    def catalog(self):
        yield None


retention.apply_retention = apply_retention
for i, fields in enumerate(json.loads(sys.argv[2])):
    operator = RetentionOperator(
        task_id=f"retention{i}", job="clicks", retain="3", dry_run="False", **fields
    )
    operator._hook = Hook
    operator.execute({})
print(json.dumps(calls))
"""


def execute(tmp_path: Path, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``RetentionOperator.execute`` with each case's fields (as rendered), the library
    replaced by a recorder: the arguments it was called with."""
    done = subprocess.run(
        [sys.executable, "-c", EXECUTE, str(REPO / "plugins"), json.dumps(cases)],
        env=airflow_environment(REPO, tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_latent_retention_operator_takes_a_rendered_none_as_no_vacuum(tmp_path: Path) -> None:
    """``vacuum_retention_hours`` rendered from an empty param (``"None"``, or empty) means
    no VACUUM, as for ``TtlCleanupOperator``; a number of hours is taken as it is. Log grace
    and outputs left unset are the library's defaults: ``LOG_GRACE``, no output table.
    ``log_grace_seconds`` rendered empty is ``LOG_GRACE`` too, a number is seconds; ``outputs``
    rendered from the DAG's array param (``| tojson``), empty, one path, or given as a list, is
    the list of tables. One interpreter for every case: Airflow's import is the cost."""
    vacuum = [{"vacuum_retention_hours": h} for h in ("None", "", "12")]
    logs: list[dict[str, Any]] = [
        {"log_grace_seconds": "None", "outputs": "[]"},
        {"log_grace_seconds": "", "outputs": "None"},
        {"log_grace_seconds": "0", "outputs": '["/out/clicks", "s3://b/late/clicks"]'},
        {"log_grace_seconds": "90.5", "outputs": "/out/clicks"},
        {"log_grace_seconds": 60, "outputs": ["/out/clicks"]},
    ]
    calls = execute(tmp_path, vacuum + logs)
    assert [c["vacuum_hours"] for c in calls[:3]] == [None, None, 12.0]
    assert calls[0] == {
        "job": "clicks",
        "retain": 3,
        "dry_run": False,
        "vacuum_hours": None,
        "log_grace": LOG_GRACE.total_seconds(),
        "outputs": [],
    }
    hour = LOG_GRACE.total_seconds()
    assert [(c["log_grace"], c["outputs"]) for c in calls[3:]] == [
        (hour, []),
        (hour, []),
        (0.0, ["/out/clicks", "s3://b/late/clicks"]),
        (90.5, ["/out/clicks"]),
        (60.0, ["/out/clicks"]),
    ]


SCHEDULE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1] + "/state_maintenance.py")
assert not bag.import_errors, bag.import_errors
dag = bag.dags["state_maintenance"]
sys.path.insert(0, sys.argv[1])
import state_maintenance as module  # the DAG file's own constants


def uris(condition):  # an Asset, or an AssetAll/AssetAny of them
    if hasattr(condition, "uri"):
        yield condition.uri
    for part in getattr(condition, "objects", ()):
        yield from uris(part)


sys.path.insert(0, sys.argv[2])
from statecore_airflow import checkpoint_asset

found = {
    "assets": sorted(uris(dag.timetable.asset_condition)),
    "job": dag.params["job"],
    "maintained": list(module.MAINTAINED_JOBS),
    "assets_of_jobs": sorted(checkpoint_asset(job).uri for job in module.MAINTAINED_JOBS),
    "log_grace_seconds": dag.params["log_grace_seconds"],
    "outputs": dag.params["outputs"],
}
print(json.dumps(found))
"""


def test_state_maintenance_is_scheduled_on_the_asset_of_every_job_it_maintains(
    tmp_path: Path,
) -> None:
    """The DAG is scheduled on the checkpoint Asset of each job of its ``MAINTAINED_JOBS`` (the
    bundled DAGs' jobs), and no fixed job is its ``job`` param's default: a run maintains the
    jobs whose checkpoints triggered it (``test_maintenance_schedule.py`` runs one)."""
    done = subprocess.run(
        [sys.executable, "-c", SCHEDULE, str(REPO / "dags"), str(REPO / "plugins")],
        env=airflow_environment(REPO, tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["job"] is None
    assert found["maintained"] == [
        "clickstream",
        "clickstream_stream",
        "clickstream_query",
        "clickstream_kafka",
    ]
    assert found["assets"] == found["assets_of_jobs"]
    # the retention's defaults are the library's: an hour's log grace, no output table
    assert found["log_grace_seconds"] == LOG_GRACE.total_seconds() and found["outputs"] == []
