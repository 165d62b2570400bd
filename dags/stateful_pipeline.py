"""
### stateful_pipeline

Runs the statecore clickstream job (`jobs/clickstream.py`) once per logical date with the Spark
provider's `SparkSubmitOperator` (connection `spark_default`, `local[*]` by default). Each run
restores keyed state from the previous day's checkpoint, processes the day's events and completes a
new checkpoint in the statecore catalog; the checkpoint is published as the Asset
`statecore://clickstream`.

**Params** (set them in *Trigger DAG w/ config*):
- `date`: the day to process (`YYYY-MM-DD`); default: the run's logical date, or its
  `run_after` for runs triggered without one.
- `parallelism`: parallel instances of the keyed operator; default: the job's current parallelism
  (as the `rescale` DAG left it). A change rescales at the next run.
- `backend`: the keyed state backend, `heap` or `rocksdb`.
- `from_savepoint`: a savepoint folder to start from instead of the latest checkpoint (works
  with an empty catalog).
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, dag

from statecore_airflow import checkpoint_asset

JOB_FILE = Path(__file__).resolve().parents[1] / "jobs" / "clickstream.py"
CLICKSTREAM_CHECKPOINTS = checkpoint_asset("clickstream")
RUN_DATE = "{{ params.date or ((dag_run.logical_date or dag_run.run_after) | ds) }}"


@dag(
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["statecore"],
    doc_md=__doc__,
    params={
        "date": Param(
            None,
            type=["null", "string"],
            format="date",
            description="day to process; default: the logical date",
        ),
        "parallelism": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            maximum=32768,
            description="default: the job's current parallelism",
        ),
        "backend": Param("heap", enum=["heap", "rocksdb"]),
        "from_savepoint": Param(
            None, type=["null", "string"], description="savepoint folder to restore from"
        ),
    },
)
def stateful_pipeline() -> None:
    SparkSubmitOperator(
        task_id="clickstream",
        conn_id="spark_default",
        application=str(JOB_FILE),
        name="statecore-clickstream",
        application_args=[
            "--date",
            RUN_DATE,
            "--parallelism={{ params.parallelism or '' }}",
            "--backend",
            "{{ params.backend }}",
            "--from-savepoint={{ params.from_savepoint or '' }}",
        ],
        conf={"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"},
        outlets=[CLICKSTREAM_CHECKPOINTS],
    )


stateful_pipeline()
