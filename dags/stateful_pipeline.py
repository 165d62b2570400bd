"""
### stateful_pipeline

Runs the statecore clickstream job (`jobs/clickstream.py`) once per logical date with the Spark
provider's `SparkSubmitOperator` (connection `spark_default`, `local[*]` by default). Each run
restores keyed state from the previous day's checkpoint, processes the day's events and completes a
new checkpoint in the statecore catalog; the checkpoint is published as the Asset
`statecore://clickstream`. The day's enriched events are committed to the Delta table
`$STATECORE_HOME/output/clickstream_events` once the checkpoint completes, and written from it
to `$STATECORE_HOME/output/clickstream/date=YYYY-MM-DD` (Parquet), by a retried run too.

Before Spark starts, the `check` task skips the run, with the reason in its log, when the day's
input is not there yet (so a scheduled run ahead of its data, or unpausing the DAG, never fails)
or when the day's checkpoint is already complete ("no-op: checkpoint N ... already complete");
it fails when `parallelism` asks to redo a complete checkpoint at another parallelism.

`catchup` is off: unpausing runs only the latest interval. A backfill (`airflow backfill create
--dag-id stateful_pipeline --from-date ... --to-date ... --reprocess-behavior failed`: the DAG
depends on the past, so Airflow asks which existing runs to run again) runs each day in order;
days already checkpointed are no-ops and days without input are skipped.

**Days run in order, or not at all.** Checkpoint ids only increase, so a day the job went past is
out of its state for good. Each task `depends_on_past` (a day waits until the previous day's
run succeeded or skipped) and is retried twice; a day that still fails blocks the later days
until it is cleared and succeeds. `check` also refuses, without retrying, a day that would leave
an earlier day out of the state (a failed day, or one whose input is there with no checkpoint),
naming those days; a day not to be processed is recorded with its reason first
(`statecore checkpoints skip clickstream 20260105 --reason "..."`).

**Params** (the Trigger button's form):
- `date`: the day to process (`YYYY-MM-DD`); default: the run's logical date, or its
  `run_after` for runs triggered without one.
- `input`: the folder (or `s3://` prefix) of `date=YYYY-MM-DD` partitions; default:
  `$STATECORE_INPUT`, else `$STATECORE_HOME/data/clickstream`.
- `parallelism`: parallel instances of the keyed operator; default: the job's current parallelism
  (as the `rescale` DAG left it). A change rescales at the next run.
- `backend`: the keyed state backend, `heap` or `rocksdb`.
- `from_savepoint`: a savepoint to start from instead of the latest checkpoint: the name of one
  of the job's savepoints (a pin restores without copying), or an export's folder (works with
  an empty catalog).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, dag, task

from statecore_airflow import IN_ORDER, IN_ORDER_RUNS, checkpoint_asset

JOB_FILE = Path(__file__).resolve().parents[1] / "jobs" / "clickstream.py"
CLICKSTREAM_CHECKPOINTS = checkpoint_asset("clickstream")
RUN_DATE = "{{ params.date or ((dag_run.logical_date or dag_run.run_after) | ds) }}"


@dag(
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=IN_ORDER_RUNS,
    default_args=IN_ORDER,
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
            None, type=["null", "string"], description="savepoint name or folder to restore from"
        ),
        "input": Param(
            None,
            type=["null", "string"],
            description="folder or s3:// prefix of date=YYYY-MM-DD partitions; default: "
            "$STATECORE_INPUT, else $STATECORE_HOME/data/clickstream",
        ),
    },
)
def stateful_pipeline() -> None:
    @task
    def check(**context: Any) -> dict[str, Any]:
        """Skip a run without input or whose checkpoint is complete; refuse a parallelism a
        complete checkpoint cannot take, and a day that would leave earlier days out of the
        job's state (failed at once: neither heals by retrying)."""
        import os
        from datetime import date

        from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

        from statecore.errors import ConfigError
        from statecore.ops.runs import plan_daily_run
        from statecore_airflow import StatecoreHook

        params, run = context["params"], context["dag_run"]
        day = params["date"] or (run.logical_date or run.run_after).date().isoformat()
        hook = StatecoreHook()
        root = (
            params["input"]
            or os.environ.get("STATECORE_INPUT")
            or f"{hook.get_config().home}/data/clickstream"
        )
        with hook.catalog() as catalog:
            try:
                plan = plan_daily_run(
                    catalog,
                    job="clickstream",
                    day=date.fromisoformat(day),
                    input_root=root,
                    parallelism=params["parallelism"],
                )
            except ConfigError as exc:  # a gap (CheckpointGapError), a parallelism refused
                raise AirflowFailException(str(exc)) from exc
        if not plan.runs:
            raise AirflowSkipException(plan.reason)
        return {"date": day, "checkpoint_id": plan.checkpoint_id}

    process = SparkSubmitOperator(
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
            "--input={{ params.input or '' }}",
            # a run that finds maintenance holding the job waits for it, as maintenance waits
            # for runs (the operators' 10 minutes), instead of failing after Spark's work
            "--lease-wait=600",
        ],
        conf={"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"},
        outlets=[CLICKSTREAM_CHECKPOINTS],
    )
    check() >> process


stateful_pipeline()
