"""
### streaming_query

Runs the clickstream job (`jobs/clickstream_stream.py`) as a **continuous** Structured Streaming
query: the `query` task submits it with the Spark provider's `SparkSubmitOperator` and
`--trigger-interval` (a micro-batch, one statecore checkpoint, per interval when files arrived);
the task runs as long as the query does. The `watch` sensor (`StreamSensor`, in reschedule mode)
reports its progress in its log and XCom (micro-batches planned and committed, input files not yet
taken, the latest checkpoint) until the query ends, and fails when the query failed or its driver
went silent (the status of a query before this run is not taken for this run's). Stop it with
the DAG `streaming_query_stop`.

**Params**
- `trigger_interval`: e.g. `10s`, `1m`.
- `parallelism`, `backend`: as for `stateful_pipeline`.

### streaming_query_stop

Stops the query gracefully: `caught_up` waits until it took every input file and completed their
micro-batches (skip it with `drain: false`), then `stop` (`StreamStopOperator`) drops the stop
marker the driver polls between micro-batches and waits until the driver reports it stopped.
With no query running (its defaults on a home where none was started), `drain` skips
`caught_up` and `stop` succeeds at once, its log and XCom giving the query's state
(`NOT_STARTED`, `STOPPED` or `FINISHED`; a failed or silent query fails it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, dag, task

from statecore_airflow import StreamSensor, StreamStopOperator

JOB = "clickstream_stream"
JOB_FILE = Path(__file__).resolve().parents[1] / "jobs" / "clickstream_stream.py"
# The query's Spark checkpoint, as the job places it by default.
CHECKPOINT_LOCATION = "{{ params.checkpoint_location or '' }}"
START = pendulum.datetime(2026, 1, 1, tz="UTC")


@dag(
    schedule=None,
    start_date=START,
    catchup=False,
    max_active_runs=1,
    tags=["statecore", "streaming"],
    doc_md=__doc__,
    params={
        "trigger_interval": Param("10s", type="string", pattern=r"^\d+\s*(s|m)"),
        "parallelism": Param(None, type=["null", "integer"], minimum=1, maximum=32768),
        "backend": Param("heap", enum=["heap", "rocksdb"]),
        "checkpoint_location": Param(
            None, type=["null", "string"], description="default: $STATECORE_HOME/streaming/<job>"
        ),
    },
)
def streaming_query() -> None:
    SparkSubmitOperator(
        task_id="query",
        conn_id="spark_default",
        application=str(JOB_FILE),
        name="statecore-clickstream-stream",
        application_args=[
            "--trigger-interval",
            "{{ params.trigger_interval }}",
            "--parallelism={{ params.parallelism or '' }}",
            "--backend",
            "{{ params.backend }}",
            f"--checkpoint-location={CHECKPOINT_LOCATION}",
        ],
        conf={"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"},
    )
    StreamSensor(
        task_id="watch",
        job=JOB,
        checkpoint_location=CHECKPOINT_LOCATION,
        wait_for="end",
        query_of_this_run=True,  # an earlier query's FAILED or FINISHED status is not this one's
        mode="reschedule",
        poke_interval=60,
        timeout=7 * 24 * 3600,
    )


@dag(
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["statecore", "streaming"],
    doc_md=__doc__,
    params={
        "drain": Param(True, type="boolean", description="wait until it caught up first"),
        "checkpoint_location": Param(None, type=["null", "string"]),
        "timeout_seconds": Param(300, type="number", minimum=1),
    },
)
def streaming_query_stop() -> None:
    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def drain(**context: Any) -> bool:
        """Wait for the query to catch up only when asked to and it runs: a query that is not
        running would never catch up (``stop`` then reports its state)."""
        import logging

        from statecore.ops.streams import RUNNING, default_checkpoint_location, stream_progress
        from statecore_airflow import StatecoreHook

        params = context["params"]
        if not params["drain"]:
            return False
        hook = StatecoreHook()
        location = params["checkpoint_location"] or default_checkpoint_location(
            hook.get_config(), JOB
        )
        with hook.catalog() as catalog:
            state = stream_progress(catalog, job=JOB, checkpoint_location=location).state
        if state != RUNNING:
            logging.getLogger(__name__).info("stream %s is %s: nothing to drain", JOB, state)
        return state == RUNNING

    caught_up = StreamSensor(
        task_id="caught_up",
        job=JOB,
        checkpoint_location=CHECKPOINT_LOCATION,
        poke_interval=5,
        timeout=3600,
    )
    stop = StreamStopOperator(
        task_id="stop",
        job=JOB,
        checkpoint_location=CHECKPOINT_LOCATION,
        timeout_seconds="{{ params.timeout_seconds }}",
        trigger_rule="none_failed",
    )
    drain() >> caught_up >> stop


streaming_query()
streaming_query_stop()
