"""Asset-triggered DAG runs on a real Airflow (SQLite), as its scheduler creates them.

:func:`run_triggered` runs a driver in a subprocess of its own: it parses the DAG folder into
the metadata database (as the DAG processor does) and unpauses the consumer DAG, records an
event of each given Asset with Airflow's own ``AssetManager.register_asset_change`` (what the
API server does when a task with that outlet succeeds), lets the scheduler's own code create
the asset-triggered run (``SchedulerJobRunner._create_dagruns_for_dags``), and runs the run's
tasks in process as ``dag.test()`` does. It prints the run's type, the Assets it consumed, each
task instance's state and XCom (mapped ones by map index).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from statecore.cli.demo import airflow_environment
from tests.airflow.dagrun import REPO

DRIVER = """
import json, sys, time
from airflow.assets.manager import AssetManager
from airflow.dag_processing.bundles.manager import DagBundlesManager
from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
from airflow.jobs.job import Job
from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
from airflow.models.asset import AssetModel
from airflow.models.dag import DagModel
from airflow.models.dagrun import DagRun
from airflow.models.xcom import XComModel
from airflow.serialization.serialized_objects import DagSerialization
from airflow.sdk.definitions.dag import _run_task
from airflow.utils.db import initdb
from airflow.utils.session import create_session
from airflow.utils.sqlalchemy import prohibit_commit
from airflow.utils.state import DagRunState, TaskInstanceState
from sqlalchemy import select

dag_id, names = sys.argv[1], json.loads(sys.argv[2])
initdb()
manager = DagBundlesManager()
manager.sync_bundles_to_db()
[bundle] = [b for b in manager.get_all_dag_bundles() if b.name == "dags-folder"]
bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
assert not bag.import_errors, bag.import_errors
sync_bag_to_db(bag, bundle.name, bundle.version)
dag = bag.get_dag(dag_id)
scheduler_dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
with create_session() as session:
    session.get(DagModel, dag_id).is_paused = False
time.sleep(0.01)  # the events come after the DAG's schedule was recorded
with create_session() as session:
    for name in names:
        asset = session.scalar(select(AssetModel).where(AssetModel.name == name))
        AssetManager.register_asset_change(asset=asset, extra={"from": "test"}, session=session)
runner = SchedulerJobRunner(job=Job(), executors=[])
with create_session() as session:
    with prohibit_commit(session) as guard:
        runner._create_dagruns_for_dags(guard, session)
with create_session() as session:
    runs = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id)).all()
    print("RUNS " + json.dumps([r.run_type for r in runs]), flush=True)
    [run] = runs
    run.state = DagRunState.RUNNING
    consumed = sorted(e.asset.name for e in run.consumed_asset_events)
    run_id = run.run_id
while True:
    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.run_id == run_id))
        run.dag = scheduler_dag
        schedulable, _ = run.update_state(session=session)
        for ti in schedulable:
            ti.try_number += 1
            ti.state = TaskInstanceState.SCHEDULED
        session.commit()
        if run.state != DagRunState.RUNNING:
            break
        todo = [ti for ti in run.get_task_instances(session=session)
                if ti.state == TaskInstanceState.SCHEDULED]
    if not todo:
        time.sleep(0.5)
    for ti in todo:
        _run_task(ti=ti, task=dag.task_dict[ti.task_id])
with create_session() as session:
    run = session.scalar(select(DagRun).where(DagRun.run_id == run_id))
    tasks, xcoms = {}, {}
    for ti in run.get_task_instances(session=session):
        name = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
        tasks[name] = str(ti.state)
        row = session.scalars(XComModel.get_many(run_id=run_id, key="return_value",
                                                 task_ids=ti.task_id, dag_ids=dag_id,
                                                 map_indexes=ti.map_index)).first()
        xcoms[name] = None if row is None else XComModel.deserialize_value(row)
    print("RUN " + json.dumps({"run_type": str(run.run_type), "state": str(run.state),
                               "consumed": consumed, "tasks": tasks, "xcom": xcoms},
                              default=str), flush=True)
"""


def run_triggered(home: Path, dag_id: str, asset_names: list[str]) -> dict[str, Any]:
    """The asset-triggered run of ``dag_id`` that events of the Assets ``asset_names`` make
    (its output appended to ``home/dag-runs.log``)."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, dag_id, json.dumps(asset_names)],
        env=airflow_environment(REPO, home),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    with (home / "dag-runs.log").open("a") as log:
        log.write(done.stdout + done.stderr)
    runs = [json.loads(line[5:]) for line in done.stdout.splitlines() if line.startswith("RUNS ")]
    assert runs == [["asset_triggered"]], (runs, done.stdout[-3000:], done.stderr[-6000:])
    [run] = [json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("RUN ")]
    return dict(run)
