"""
### streaming_kafka

Runs the clickstream job over a **Kafka topic** (`jobs/clickstream_kafka.py`, Spark's Kafka
source) in scheduled `availableNow` increments, as `streaming_pipeline` does over files: each
run submits the query with the Spark provider's `SparkSubmitOperator` (the Kafka source's JARs
from `make jars` passed as `--jars`), which takes every record that arrived since the last run
(Spark's checkpoint under `$STATECORE_HOME/streaming/clickstream_kafka` holds the offsets), as
micro-batches of at most `max_offsets_per_trigger` records, then exits. Each micro-batch is one
statecore checkpoint whose input identity holds the topic's offsets; its output is committed with
it to the Delta table `$STATECORE_HOME/output/clickstream_kafka`. A record is one click: key the
user id, value `{"event_type": "purchase", "amount": 12.5}`, its Kafka timestamp the event time.

**Where the broker is**: the `bootstrap_servers` param, else the Airflow connection
`kafka_conn_id` (default `kafka_default`): the `bootstrap.servers` of its extra, as the official
Kafka provider's `kafka` connection keeps it (the provider need not be installed), else its host
and port. Before Spark starts, the `check` task **skips** the run, with the reason in its log,
when neither is set (so unpausing the DAG before configuring it fails nothing), **fails** when
no broker answers there, and **skips** when the topic is not there ("no input at ...") or has no
record past the end offsets the last successful run saw ("no new input since run ..."): records
that arrive a few times a day start Spark only then, not every hour. The `checkpoints` task then
reports the checkpoints this run completed (those above the job's latest one when `check` ran,
recorded in this run's XCom), the state of this run's query and the topic's offsets the job has
read up to, and publishes the checkpoints as an event of the Asset
`statecore://clickstream_kafka`, every run alike.

**No record left unread by a skip.** `check` notes the topic's end offsets (partition ->
offset, read with `kafka-python`, as the job's source reads: read_uncommitted) in the run's
XCom; once the query succeeded, `checkpoints` records them as read in
`$STATECORE_HOME/streaming/clickstream_kafka/_statecore/input_read.json` (an availableNow query
reads up to the end offsets when it starts, past those `check` saw). A record produced later —
during the run's query or after — is past that record, so the next run submits; a run that
failed records nothing; another topic or broker list is all new.

**Params**
- `bootstrap_servers`: `host:port[,host:port...]`; default: the connection's.
- `topic`: the topic to read (one topic per job: Spark's checkpoint holds its offsets).
- `kafka_conn_id`: the Airflow connection read when `bootstrap_servers` is not set.
- `starting_offsets`: `earliest` or `latest`, where the job's first run starts.
- `max_offsets_per_trigger`: records per micro-batch (default: all that are there).
- `parallelism`, `backend`: as for `streaming_pipeline`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, dag, task

from statecore_airflow import IN_ORDER, IN_ORDER_RUNS, QUERY_RUN_ID, checkpoint_asset

JOB = "clickstream_kafka"
JOB_FILE = Path(__file__).resolve().parents[1] / "jobs" / "clickstream_kafka.py"
CHECKPOINTS = checkpoint_asset(JOB)
KAFKA_JARS = ("spark-sql-kafka-", "spark-token-provider-kafka-", "kafka-clients-", "commons-pool2-")


def kafka_jars() -> str:
    """The Kafka source's JARs in statecore's JAR folder (``make jars``), comma-separated for
    spark-submit's ``--jars``: a driver spark-submit started cannot add them to its classpath
    later. Empty where the folder has none (the image puts them in Spark's own ``jars/``)."""
    from statecore.spark.session import jars_folder

    folder = jars_folder()
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    return ",".join(str(j) for j in jars if j.name.startswith(KAFKA_JARS))


@dag(
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args=IN_ORDER,
    max_active_runs=IN_ORDER_RUNS,
    tags=["statecore", "streaming", "kafka"],
    doc_md=__doc__,
    user_defined_macros={"kafka_jars": kafka_jars},
    params={
        "bootstrap_servers": Param(
            None,
            type=["null", "string"],
            description="host:port[,host:port...]; default: the connection kafka_conn_id's",
        ),
        "topic": Param("clicks", type="string", minLength=1),
        "kafka_conn_id": Param("kafka_default", type="string", minLength=1),
        "starting_offsets": Param("earliest", enum=["earliest", "latest"]),
        "max_offsets_per_trigger": Param(
            None, type=["null", "integer"], minimum=1, description="default: all new records"
        ),
        "parallelism": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            maximum=32768,
            description="default: the job's current parallelism",
        ),
        "backend": Param("heap", enum=["heap", "rocksdb"]),
    },
)
def streaming_kafka() -> None:
    @task
    def check(**context: Any) -> str:
        """The bootstrap servers: the param's, else the connection's; skip the run without
        either, fail it when no broker answers there, skip it when the topic has no record past
        what the last run that succeeded saw. Notes the topic's end offsets, and where the job
        stands, so `checkpoints` records and publishes this run's."""
        import socket

        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException, AirflowSkipException

        from statecore_airflow import StatecoreHook, mark_checkpoints, skip_without_new_records

        params = context["params"]
        servers = params["bootstrap_servers"]
        if not servers:
            try:
                conn = BaseHook.get_connection(params["kafka_conn_id"])
            except AirflowNotFoundException:
                conn = None
            if conn is not None:
                servers = conn.extra_dejson.get("bootstrap.servers") or (
                    f"{conn.host}:{conn.port or 9092}" if conn.host else None
                )
        if not servers:
            raise AirflowSkipException(
                "no Kafka broker configured: set the bootstrap_servers param, or the connection "
                f"{params['kafka_conn_id']!r} (its extra's bootstrap.servers, or its host and port)"
            )
        for server in servers.split(","):
            host, _, port = server.strip().rpartition(":")
            try:
                with socket.create_connection((host.strip("[]"), int(port)), timeout=10):
                    break
            except (OSError, ValueError):
                continue
        else:
            raise RuntimeError(f"no Kafka broker answers at {servers}")
        skip_without_new_records(context, JOB, str(servers), params["topic"])
        with StatecoreHook().catalog() as catalog:
            mark_checkpoints(context, catalog, JOB)
        return str(servers)

    servers = check()
    increment = SparkSubmitOperator(
        task_id="increment",
        conn_id="spark_default",
        application=str(JOB_FILE),
        name="statecore-clickstream-kafka",
        jars="{{ kafka_jars() }}",
        application_args=[
            "--trigger",
            "availableNow",
            "--bootstrap-servers={{ ti.xcom_pull(task_ids='check') }}",
            "--topic",
            "{{ params.topic }}",
            "--starting-offsets",
            "{{ params.starting_offsets }}",
            "--max-offsets-per-trigger={{ params.max_offsets_per_trigger or '' }}",
            "--parallelism={{ params.parallelism or '' }}",
            "--backend",
            "{{ params.backend }}",
            f"--run-id={QUERY_RUN_ID}",
        ],
        conf={"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"},
    )

    @task(outlets=[CHECKPOINTS])
    def checkpoints(**context: Any) -> dict[str, Any]:
        """The checkpoints this run completed (the Asset event), the state of this run's query
        and the offsets read up to."""
        import json

        from statecore.catalog import CheckpointKind
        from statecore.ops.streams import default_checkpoint_location, read_status
        from statecore_airflow import (
            StatecoreHook,
            publish_checkpoints,
            query_run_id,
            record_input_read,
        )

        hook = StatecoreHook()
        status = read_status(default_checkpoint_location(hook.get_config(), JOB))
        if status is not None and status.run_id != query_run_id(context):
            status = None  # another run's query: this run's never wrote
        with hook.catalog() as catalog:
            # the latest micro-batch's checkpoint (not a maintenance one): its offsets
            latest = (
                catalog.latest_restorable(JOB, kinds=[CheckpointKind.CHECKPOINT])
                if catalog.has_job(JOB)
                else None
            )
            last = None if latest is None else latest.checkpoint_id
            completed = publish_checkpoints(context, catalog, JOB, last, marked_by="check")
        identity = (latest.input_identity or "") if latest is not None else ""
        offsets = None
        if identity.startswith("given:{"):  # {"batch_id": n, "offsets": {"end": [...], ...}}
            offsets = (json.loads(identity.removeprefix("given:")).get("offsets") or {}).get("end")
        record_input_read(context, JOB)
        return {
            "state": None if status is None else status.state,
            "completed": completed,
            "last_checkpoint": last,
            "offsets": offsets[0] if offsets else None,
        }

    servers >> increment >> checkpoints()


streaming_kafka()
