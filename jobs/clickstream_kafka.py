"""The clickstream job as a Structured Streaming query over a Kafka topic.

The same ``UserActivity`` function, states and output as ``jobs/clickstream.py`` and
``jobs/clickstream_stream.py``, but the input is a topic read with Spark's Kafka source
(``spark-sql-kafka-0-10``, which ``make jars`` resolves into ``.venv/jars``). A record is one
click: its key the user id, its value ``{"event_type": "purchase", "amount": 12.5}`` (JSON), its
Kafka timestamp the event time. Each micro-batch is one statecore checkpoint whose id is the
micro-batch id and whose input identity holds the topic's offsets; its output rows are committed
exactly once to a Delta table with it. Spark's checkpoint (``--checkpoint-location``) holds the
offsets each micro-batch took, so a run continues where the last one ended;
``--starting-offsets`` only counts for the first.

    spark-submit --jars <the Kafka source's JARs> jobs/clickstream_kafka.py \\
        --bootstrap-servers broker:9092 --topic clicks --trigger availableNow

The Airflow DAG ``streaming_kafka`` runs it on a schedule, one ``availableNow`` increment a run.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from statecore.backends import backend_names
from statecore.config import StatecoreConfig
from statecore.ops.streams import (
    default_checkpoint_location,
)
from statecore.spark import keyed_stream
from statecore.spark.session import build_session

try:
    from jobs import clickstream, clickstream_stream
except ImportError:  # submitted as a file: its folder is on sys.path, not the repository's
    import clickstream  # type: ignore[no-redef]
    import clickstream_stream  # type: ignore[no-redef]

# Spark's workers need not import the jobs folder: the function ships by value.
cloudpickle.register_pickle_by_value(clickstream)

JOB = "clickstream_kafka"
RECORD_VALUE = "event_type string, amount double"
"""The schema of a record's JSON value."""


def read(
    spark: SparkSession,
    *,
    bootstrap_servers: str,
    topic: str,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
) -> DataFrame:
    """The topic as a stream of clicks: ``user_id, event_type, amount, ts``."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    value = F.from_json(F.col("value").cast("string"), RECORD_VALUE)
    return reader.load().select(
        F.col("key").cast("string").alias("user_id"),
        value["event_type"].alias("event_type"),
        value["amount"].alias("amount"),
        F.col("timestamp").alias("ts"),
    )


def start(
    spark: SparkSession,
    *,
    bootstrap_servers: str,
    topic: str,
    checkpoint_location: str,
    output_table: str,
    job: str = JOB,
    trigger: dict[str, Any] | None = None,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    parallelism: int | None = None,
    backend: str = "heap",
    retain_checkpoints: int = clickstream_stream.RETAIN_CHECKPOINTS,
) -> StreamingQuery:
    """Start the query; each micro-batch is checkpoint ``batch_id`` of ``job``."""
    clicks = read(
        spark,
        bootstrap_servers=bootstrap_servers,
        topic=topic,
        starting_offsets=starting_offsets,
        max_offsets_per_trigger=max_offsets_per_trigger,
    )
    return keyed_stream(
        clicks,
        key="user_id",
        function=clickstream.UserActivity(),
        output_schema=clickstream.OUTPUT_SCHEMA,
        job=job,
        checkpoint_location=checkpoint_location,
        trigger=trigger,
        parallelism=parallelism,
        order_by=["ts", "event_type", "amount"],
        backend=backend,
        output_table=output_table,
        retain_checkpoints=retain_checkpoints,
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The job's arguments (the DAG renders them from its params)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True, help="host:port[,host:port...]")
    parser.add_argument("--topic", required=True)
    parser.add_argument(
        "--starting-offsets",
        default="earliest",
        choices=["earliest", "latest"],
        help="where a new query starts (a query continues from its checkpoint location)",
    )
    parser.add_argument("--max-offsets-per-trigger", type=clickstream._optional_int)
    parser.add_argument(
        "--checkpoint-location",
        help="Spark's streaming checkpoint (default: $STATECORE_HOME/streaming/<job>)",
    )
    parser.add_argument(
        "--output-table", help="Delta table of the output (default: $STATECORE_HOME/output/<job>)"
    )
    parser.add_argument("--job", default=JOB)
    parser.add_argument("--trigger", choices=["availableNow", "once"])
    parser.add_argument("--trigger-interval", help="a continuous query, e.g. 10s")
    parser.add_argument("--parallelism", type=clickstream._optional_int)
    parser.add_argument("--backend", default="heap", choices=backend_names())
    parser.add_argument(
        "--retain-checkpoints", type=int, default=clickstream_stream.RETAIN_CHECKPOINTS
    )
    parser.add_argument(
        "--run-id", help="the run starting the query, kept in its status (a DAG's run)"
    )
    args = parser.parse_args(argv)
    if not args.bootstrap_servers.strip() or not args.topic.strip():
        parser.error("--bootstrap-servers and --topic must not be empty")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config = StatecoreConfig.resolve()
    checkpoint_location = args.checkpoint_location or default_checkpoint_location(config, args.job)
    # statecore's lines at INFO, everything else (py4j's connection chatter) from WARNING
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("statecore").setLevel(logging.INFO)
    spark = build_session(app_name=f"statecore-{args.job}")  # UTC, as Delta's timestamps
    clickstream_stream.run(
        spark,
        lambda: start(
            spark,
            bootstrap_servers=args.bootstrap_servers,
            topic=args.topic,
            checkpoint_location=checkpoint_location,
            output_table=args.output_table or f"{config.home}/output/{args.job}",
            job=args.job,
            trigger=clickstream_stream.trigger_of(args.trigger, args.trigger_interval),
            starting_offsets=args.starting_offsets,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            parallelism=args.parallelism,
            backend=args.backend,
            retain_checkpoints=args.retain_checkpoints,
        ),
        checkpoint_location=checkpoint_location,
        job=args.job,
        run_id=args.run_id or None,
    )


if __name__ == "__main__":
    main()
