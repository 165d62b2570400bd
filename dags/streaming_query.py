"""
### streaming_query

Runs the clickstream function (`jobs/clickstream_stream.py`) as a **continuous** Structured
Streaming query of its own job, `clickstream_query` (its state, its output table
`$STATECORE_HOME/output/clickstream_query` and its Spark checkpoint
`$STATECORE_HOME/streaming/clickstream_query` are its own, so it runs beside `streaming_pipeline`
on one home without reading the same files into the same state twice): the `query` task submits
it with the Spark provider's `SparkSubmitOperator` and `--trigger-interval` (a micro-batch, one
statecore checkpoint, per interval when files arrived); the task runs as long as the query does.
A location another query owns (another job's stream, or a query running there now) is refused
before anything is written there. The `watch` sensor (`StreamSensor`, in reschedule mode)
reports the progress of this run's query in its log and XCom (micro-batches planned and
committed, input files not yet taken, the latest checkpoint) until the query ends, and fails
when the query failed or its driver went silent: the driver keeps the run's id
(`<dag_id>/<run_id>`) in its status, and a status of another run's query is not taken for this
run's. Stop it with the DAG `streaming_query_stop`.

**Params**
- `trigger_interval`: e.g. `10s`, `1m`.
- `job`: the statecore job the query runs as (default `clickstream_query`).
- `checkpoint_location`: default `$STATECORE_HOME/streaming/<job>`.
- `parallelism`, `backend`: as for `stateful_pipeline`.

### streaming_query_stop

Stops the query of `job` (default `clickstream_query`, the `streaming_query` DAG's) gracefully:
`caught_up` waits until it took every input file and completed their micro-batches (skip it with
`drain: false`), then `stop` (`StreamStopOperator`) drops the stop marker the driver polls
between micro-batches and returns as soon as the driver reports it stopped. A query that ends
meanwhile ends the wait at once. With no query running (its defaults on a home where none was
started, or a query that already ended), `drain` skips `caught_up` and `stop` succeeds at once,
its log and XCom giving the query's state (`NOT_STARTED`, `STOPPED` or `FINISHED`; a failed or
silent query fails it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, dag, task

from statecore_airflow import QUERY_RUN_ID, RETRIED, StreamSensor, StreamStopOperator

JOB = "clickstream_query"
"""The continuous query's own job (``streaming_pipeline`` runs ``clickstream_stream``)."""
JOB_FILE = Path(__file__).resolve().parents[1] / "jobs" / "clickstream_stream.py"
# The query's Spark checkpoint, as the job places it by default (<home>/streaming/<job>).
CHECKPOINT_LOCATION = "{{ params.checkpoint_location or '' }}"
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def job_param() -> Param:
    """The ``job`` param of both DAGs: the query's job, whose location is the default."""
    return Param(JOB, type="string", minLength=1, description="the statecore job")


@dag(
    schedule=None,
    start_date=START,
    catchup=False,
    default_args=RETRIED,
    max_active_runs=1,
    tags=["statecore", "streaming"],
    doc_md=__doc__,
    params={
        "trigger_interval": Param("10s", type="string", pattern=r"^\d+\s*(s|m)"),
        "job": job_param(),
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
            "--job",
            "{{ params.job }}",
            "--trigger-interval",
            "{{ params.trigger_interval }}",
            "--parallelism={{ params.parallelism or '' }}",
            "--backend",
            "{{ params.backend }}",
            f"--checkpoint-location={CHECKPOINT_LOCATION}",
            f"--run-id={QUERY_RUN_ID}",
        ],
        conf={"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"},
    )
    StreamSensor(
        task_id="watch",
        job="{{ params.job }}",
        checkpoint_location=CHECKPOINT_LOCATION,
        wait_for="end",
        query_of_this_run=True,  # only the status of the query this run started counts
        mode="reschedule",
        poke_interval=60,
        timeout=7 * 24 * 3600,
    )


@dag(
    schedule=None,
    start_date=START,
    catchup=False,
    default_args=RETRIED,
    tags=["statecore", "streaming"],
    doc_md=__doc__,
    params={
        "drain": Param(True, type="boolean", description="wait until it caught up first"),
        "job": job_param(),
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
        job = params["job"]
        hook = StatecoreHook()
        location = params["checkpoint_location"] or default_checkpoint_location(
            hook.get_config(), job
        )
        with hook.catalog() as catalog:
            state = stream_progress(catalog, job=job, checkpoint_location=location).state
        if state != RUNNING:
            logging.getLogger(__name__).info("stream %s is %s: nothing to drain", job, state)
        return state == RUNNING

    caught_up = StreamSensor(
        task_id="caught_up",
        job="{{ params.job }}",
        checkpoint_location=CHECKPOINT_LOCATION,
        poke_interval=5,
        timeout=3600,
    )
    stop = StreamStopOperator(
        task_id="stop",
        job="{{ params.job }}",
        checkpoint_location=CHECKPOINT_LOCATION,
        timeout_seconds="{{ params.timeout_seconds }}",
        trigger_rule="none_failed",
    )
    drain() >> caught_up >> stop


streaming_query()
streaming_query_stop()
