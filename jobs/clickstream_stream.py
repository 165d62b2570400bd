"""The clickstream job as a Structured Streaming query over the clickstream's input folder.

The same ``UserActivity`` function, states and output as ``jobs/clickstream.py``, but the input is
a file stream over ``$STATECORE_HOME/data/clickstream`` (its ``date=YYYY-MM-DD`` partitions, and
any file added later): each micro-batch is one statecore checkpoint whose id is the micro-batch id,
its output rows are committed exactly once to a Delta table with it, and the run keeps only the
last ``--retain-checkpoints`` checkpoints in the catalog. Spark's own checkpoint
(``--checkpoint-location``) holds the source's offsets: which files each micro-batch took.

    spark-submit jobs/clickstream_stream.py --trigger availableNow      # what is there, then exit
    spark-submit jobs/clickstream_stream.py --trigger-interval 10s      # a continuous query

The Airflow DAG ``streaming_pipeline`` runs the first form on a schedule. A continuous query
stops gracefully when a stop marker appears (``statecore_airflow.StreamStopOperator``, or
:func:`statecore.ops.streams.request_stop`): the driver polls it between micro-batches. The driver
keeps a status file next to Spark's checkpoint (:mod:`statecore.ops.streams`) that
``StreamSensor`` watches.
"""

from __future__ import annotations

import argparse
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql import types as T
from pyspark.sql.streaming import StreamingQuery

from statecore.backends import backend_names
from statecore.config import StatecoreConfig
from statecore.ops.streams import (
    FAILED,
    FINISHED,
    RUNNING,
    STOPPED,
    StreamStatus,
    check_location,
    clear_stop,
    default_checkpoint_location,
    stop_requested,
    write_status,
)
from statecore.spark import keyed_stream
from statecore.spark.session import build_session

try:
    from jobs import clickstream
except ImportError:  # submitted as a file: its folder is on sys.path, not the repository's
    import clickstream  # type: ignore[no-redef]

# Spark's workers need not import the jobs folder: the function ships by value.
cloudpickle.register_pickle_by_value(clickstream)

JOB = "clickstream_stream"
RETAIN_CHECKPOINTS = 10
POLL_SECONDS = 1.0

INPUT_SCHEMA = T.StructType(
    [
        T.StructField("user_id", T.StringType()),
        T.StructField("event_type", T.StringType()),
        T.StructField("amount", T.DoubleType()),
        T.StructField("ts", T.TimestampType()),
    ]
)


def trigger_of(trigger: str | None, interval: str | None) -> dict[str, Any] | None:
    """``DataStreamWriter.trigger`` keywords: ``availableNow``, ``once`` or a processing-time
    interval such as ``10s`` / ``2 minutes``; ``None`` is Spark's default (as fast as it can).

    >>> trigger_of("availableNow", None)
    {'availableNow': True}
    >>> trigger_of(None, "10s")
    {'processingTime': '10 seconds'}
    """
    if interval:
        found = re.fullmatch(r"\s*(\d+)\s*(s|sec|seconds?|m|min|minutes?)\s*", interval)
        if found is None:
            raise SystemExit(f"--trigger-interval {interval!r}: use e.g. 10s or 2m")
        unit = "seconds" if found.group(2).startswith("s") else "minutes"
        return {"processingTime": f"{found.group(1)} {unit}"}
    if trigger in (None, ""):
        return None
    if trigger not in ("availableNow", "once"):
        raise SystemExit(f"--trigger {trigger!r}: use availableNow or once")
    return {trigger: True}


def start(
    spark: SparkSession,
    *,
    input_path: str,
    checkpoint_location: str,
    output_table: str,
    job: str = JOB,
    trigger: dict[str, Any] | None = None,
    parallelism: int | None = None,
    backend: str = "heap",
    rules: Mapping[str, float] | None = None,
    max_files_per_trigger: int | None = None,
    retain_checkpoints: int = RETAIN_CHECKPOINTS,
    query_name: str | None = None,
) -> StreamingQuery:
    """Start the query; each micro-batch is checkpoint ``batch_id`` of ``job``."""
    reader = spark.readStream.schema(INPUT_SCHEMA).option("recursiveFileLookup", "true")
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    events = reader.parquet(input_path)
    # Each micro-batch is one checkpoint (its id the micro-batch id), so a micro-batch Spark
    # replays after a failure is a no-op; the watermark and the warm state carry over.
    return keyed_stream(
        events.select("user_id", "event_type", "amount", "ts"),
        key="user_id",
        function=clickstream.UserActivity(rules),
        output_schema=clickstream.OUTPUT_SCHEMA,
        job=job,
        checkpoint_location=checkpoint_location,
        trigger=trigger,
        parallelism=parallelism,
        order_by=["ts", "event_type", "amount"],
        backend=backend,
        output_table=output_table,
        retain_checkpoints=retain_checkpoints,
        query_name=query_name,
    )


def watch(
    query: StreamingQuery,
    *,
    checkpoint_location: str,
    job: str,
    input_path: str | None = None,
    run_id: str | None = None,
) -> str:
    """Keep the status file fresh until the query ends, stopping it between micro-batches
    once a stop marker appears; the final state (``FAILED`` raises after recording it)."""
    batch_id = None

    def status(state: str, error: str | None = None) -> None:
        write_status(
            checkpoint_location,
            StreamStatus(
                job=job,
                state=state,
                query_id=str(query.id),
                batch_id=batch_id,
                error=error,
                input_path=input_path,
                run_id=run_id,
            ),
        )

    try:
        while query.isActive:
            if stop_requested(checkpoint_location) and not query.status["isTriggerActive"]:
                query.stop()
                clear_stop(checkpoint_location)
                status(STOPPED)
                return STOPPED
            progress = query.lastProgress
            batch_id = None if progress is None else int(progress["batchId"])
            status(RUNNING)
            query.awaitTermination(POLL_SECONDS)
        query.awaitTermination()  # raises what made the query fail
        progress = query.lastProgress
        batch_id = None if progress is None else int(progress["batchId"])
    except Exception as exc:
        status(FAILED, error=str(exc))
        raise
    status(FINISHED)
    return FINISHED


def run(
    spark: SparkSession,
    start_query: Callable[[], StreamingQuery],
    *,
    checkpoint_location: str,
    job: str,
    input_path: str | None = None,
    run_id: str | None = None,
) -> str:
    """A stream job's run (this one's and ``jobs/clickstream_kafka.py``'s): refuse a location
    another query owns (:func:`~statecore.ops.streams.check_location`, before anything is
    written there), clear a stop marker left from before, record the stream RUNNING (as
    started by ``run_id``), start the query and :func:`watch` it to its end, then stop Spark;
    the final state. A query that fails to start is recorded FAILED with its error (not left
    RUNNING, which would read as STALE once the heartbeat stops)."""
    check_location(checkpoint_location, job=job, run_id=run_id)
    clear_stop(checkpoint_location)
    write_status(
        checkpoint_location,
        StreamStatus(job=job, state=RUNNING, input_path=input_path, run_id=run_id),
    )
    started = time.monotonic()
    try:
        query = start_query()
    except Exception as exc:
        failed = StreamStatus(
            job=job, state=FAILED, error=str(exc), input_path=input_path, run_id=run_id
        )
        write_status(checkpoint_location, failed)
        raise
    state = watch(
        query,
        checkpoint_location=checkpoint_location,
        job=job,
        input_path=input_path,
        run_id=run_id,
    )
    print(f"query {state.lower()} after {time.monotonic() - started:.1f} s", flush=True)
    spark.stop()
    return state


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The job's arguments (the DAGs render them from their params)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", help="default: $STATECORE_HOME/data/clickstream")
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
    parser.add_argument("--max-files-per-trigger", type=clickstream._optional_int)
    parser.add_argument("--parallelism", type=clickstream._optional_int)
    parser.add_argument("--backend", default="heap", choices=backend_names())
    parser.add_argument("--retain-checkpoints", type=int, default=RETAIN_CHECKPOINTS)
    parser.add_argument(
        "--run-id", help="the run starting the query, kept in its status (a DAG's run)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config = StatecoreConfig.resolve()
    checkpoint_location = args.checkpoint_location or default_checkpoint_location(config, args.job)
    input_path = args.input or f"{config.home}/data/clickstream"
    # statecore's lines at INFO, everything else (py4j's connection chatter) from WARNING
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("statecore").setLevel(logging.INFO)
    spark = build_session(app_name=f"statecore-{args.job}")  # UTC, as Delta's timestamps
    run(
        spark,
        lambda: start(
            spark,
            input_path=input_path,
            checkpoint_location=checkpoint_location,
            output_table=args.output_table or f"{config.home}/output/{args.job}",
            job=args.job,
            trigger=trigger_of(args.trigger, args.trigger_interval),
            parallelism=args.parallelism,
            backend=args.backend,
            max_files_per_trigger=args.max_files_per_trigger,
            retain_checkpoints=args.retain_checkpoints,
        ),
        checkpoint_location=checkpoint_location,
        job=args.job,
        input_path=input_path,
        run_id=args.run_id or None,
    )


if __name__ == "__main__":
    main()
