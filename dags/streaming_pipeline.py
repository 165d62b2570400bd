"""
### streaming_pipeline

Runs the clickstream job **as a stream** (`jobs/clickstream_stream.py`) in scheduled
`availableNow` increments, the usual way to orchestrate Structured Streaming with Airflow. The
`check` task skips a run, with the reason in its log, while the input folder
`$STATECORE_HOME/data/clickstream` is not there ("no input at ..."), and while no file in it is
new since the last run that succeeded ("no new input since run ..."): input that arrives a few
times a day starts Spark only then, not every hour. Otherwise each run submits the query with
the Spark provider's `SparkSubmitOperator`; it takes every input file that arrived since the
last run (Spark's checkpoint under `$STATECORE_HOME/streaming/` remembers which), as
micro-batches of at most `max_files_per_trigger` files, then exits. Each micro-batch is one
statecore checkpoint (its id is the micro-batch id, so a replayed micro-batch is a no-op), its
output committed with it to the Delta table `$STATECORE_HOME/output/clickstream_stream`, and the
catalog keeps the job's last 10 checkpoints. The `checkpoints` task then reports the progress of
this run's query (its driver's status names the run) and publishes the checkpoints this run
completed (those above the job's latest one when `check` ran, which `check` records in this
run's XCom) as an event of the Asset `statecore://clickstream_stream` (its extra names them and
the run), every run alike, however many ran before.

**No file left unread by a skip.** `check` notes the files it sees (path, size, modification
time) in the run's XCom; once the query succeeded, `checkpoints` records that listing as read
in `$STATECORE_HOME/streaming/clickstream_stream/_statecore/input_read.json` (an availableNow
query takes every file there when it starts, so it read them all). A file that lands later —
during the run's query or after — is not in that record, so the next run submits; a run that
failed records nothing, so the next run submits as well.

The query's Spark checkpoint is `$STATECORE_HOME/streaming/clickstream_stream`, its own: the
continuous query of the `streaming_query` DAG is another job with another location.

**Params**
- `parallelism`: parallel instances of the keyed operator; default: the job's current one.
- `backend`: the keyed state backend, `heap` or `rocksdb`.
- `max_files_per_trigger`: input files per micro-batch (default: all that are there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, dag, task

from statecore_airflow import IN_ORDER, IN_ORDER_RUNS, QUERY_RUN_ID, checkpoint_asset

JOB = "clickstream_stream"
JOB_FILE = Path(__file__).resolve().parents[1] / "jobs" / "clickstream_stream.py"
CHECKPOINTS = checkpoint_asset(JOB)


@dag(
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args=IN_ORDER,
    max_active_runs=IN_ORDER_RUNS,
    tags=["statecore", "streaming"],
    doc_md=__doc__,
    params={
        "parallelism": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            maximum=32768,
            description="default: the job's current parallelism",
        ),
        "backend": Param("heap", enum=["heap", "rocksdb"]),
        "max_files_per_trigger": Param(
            None, type=["null", "integer"], minimum=1, description="default: all new files"
        ),
    },
)
def streaming_pipeline() -> None:
    @task
    def check(**context: Any) -> str:
        """Skip the run before Spark starts while the input folder is not there (Spark's file
        source fails on a missing folder): unpausing the DAG on a fresh home fails nothing; and
        while no file in it is new since the last run that succeeded. Notes the files it saw,
        and where the job stands, so `checkpoints` records and publishes this run's."""
        from airflow.sdk.exceptions import AirflowSkipException

        from statecore.ops.runs import input_exists
        from statecore_airflow import StatecoreHook, mark_checkpoints, skip_without_new_files

        hook = StatecoreHook()
        root = f"{hook.get_config().home}/data/clickstream"
        if not input_exists(root):
            raise AirflowSkipException(f"no input at {root} (yet): nothing to stream")
        skip_without_new_files(context, JOB, root)
        with hook.catalog() as catalog:
            mark_checkpoints(context, catalog, JOB)
        return root

    increment = SparkSubmitOperator(
        task_id="increment",
        conn_id="spark_default",
        application=str(JOB_FILE),
        name="statecore-clickstream-stream",
        application_args=[
            "--trigger",
            "availableNow",
            "--parallelism={{ params.parallelism or '' }}",
            "--max-files-per-trigger={{ params.max_files_per_trigger or '' }}",
            "--backend",
            "{{ params.backend }}",
            f"--run-id={QUERY_RUN_ID}",
        ],
        conf={"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"},
    )

    @task(outlets=[CHECKPOINTS])
    def checkpoints(**context: Any) -> dict[str, Any]:
        """This run's query's progress, and the checkpoints this run completed as the Asset
        event; the files `check` saw recorded as read (the query succeeded)."""
        from statecore.ops.streams import default_checkpoint_location, stream_progress
        from statecore_airflow import (
            StatecoreHook,
            publish_checkpoints,
            query_run_id,
            record_input_read,
        )

        hook = StatecoreHook()
        config = hook.get_config()
        with hook.catalog() as catalog:
            progress = stream_progress(
                catalog,
                job=JOB,
                checkpoint_location=default_checkpoint_location(config, JOB),
                run_id=query_run_id(context),
            ).to_dict()
            progress["completed"] = publish_checkpoints(
                context, catalog, JOB, progress["last_checkpoint"], marked_by="check"
            )
        record_input_read(context, JOB)
        return progress

    check() >> increment >> checkpoints()


streaming_pipeline()
