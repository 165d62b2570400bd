"""The stream of the Kafka tests: clicks keyed by the record key, the Kafka timestamp as event
time, ``{"amount": n}`` as value; per user the running count and total, each output row naming
the record's partition and offset, so a test can match output against the topic.

``python -m tests.kafka.kafka_job --bootstrap-servers ... --topic t --job j
--checkpoint-location ... --output-table ... [--max-offsets-per-trigger n]`` runs it
(``availableNow``) in a driver of its own, which a kill point armed in its environment SIGKILLs
(:mod:`statecore.snapshot.faults`; a point in a task kills this driver too).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from kafka import KafkaProducer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.query import StreamingQuery

from statecore.descriptors import ValueStateDescriptor
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.snapshot.faults import FAULT_PID_ENV
from statecore.spark import keyed_stream

OUTPUT = T.StructType(
    [
        T.StructField("user", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("count", T.LongType()),
        T.StructField("total", T.LongType()),
    ]
)


class Totals(KeyedProcessFunction):
    """Per user: how many clicks and the total of their amounts."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", int, default=0))
        self.total = runtime_context.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        self.count.update(self.count.value() + 1)
        self.total.update(self.total.value() + value.amount)
        yield ctx.current_key, value.partition, value.offset, self.count.value(), self.total.value()


def produce(
    bootstrap_servers: str,
    topic: str,
    clicks: list[tuple[str, int, int]],
    *,
    partition: int | None = None,
) -> None:
    """``(user, amount, timestamp ms)`` clicks, keyed by user, each with its Kafka timestamp
    (to the key's partition, or to ``partition``)."""
    send_records(
        bootstrap_servers,
        topic,
        [(user, {"amount": amount}, ts) for user, amount, ts in clicks],
        partition=partition,
    )


def send_records(
    bootstrap_servers: str,
    topic: str,
    records: Iterable[tuple[str, dict[str, Any], int]],
    *,
    partition: int | None = None,
) -> None:
    """``(key, JSON value, timestamp ms)`` records, each acknowledged by every replica (to the
    key's partition, or to ``partition``); raises what the broker refused."""
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all")
    sent = [
        producer.send(
            topic,
            key=key.encode(),
            value=json.dumps(value).encode(),
            timestamp_ms=ts,
            partition=partition,
        )
        for key, value, ts in records
    ]
    producer.flush()
    producer.close()
    for future in sent:
        future.get(timeout=0)  # raises what the broker refused


def read(spark: SparkSession, bootstrap_servers: str, topic: str, **options: Any) -> DataFrame:
    """The topic as a stream of ``user, ts, amount, partition, offset``."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load().select(
        F.col("key").cast("string").alias("user"),
        F.col("timestamp").alias("ts"),
        F.from_json(F.col("value").cast("string"), "amount long").amount.alias("amount"),
        "partition",
        "offset",
    )


def start(
    stream: DataFrame, *, job: str, checkpoint_location: str, output_table: str, **options: Any
) -> StreamingQuery:
    """The tests' Kafka query: :class:`Totals` keyed by user at parallelism 2, event time
    ``ts``, ``availableNow``; ``options`` are other arguments of ``keyed_stream`` (e.g. another
    ``trigger``)."""
    arguments: dict[str, Any] = {"trigger": {"availableNow": True}, "parallelism": 2} | options
    return keyed_stream(
        stream,
        key="user",
        function=Totals(),
        output_schema=OUTPUT,
        job=job,
        checkpoint_location=checkpoint_location,
        output_table=output_table,
        event_time="ts",
        **arguments,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests.kafka.kafka_job")
    for name in ("bootstrap-servers", "topic", "job", "checkpoint-location", "output-table"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--max-offsets-per-trigger", type=int)
    args = parser.parse_args(argv)
    os.environ[FAULT_PID_ENV] = str(os.getpid())  # before Spark starts: its workers inherit it
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from tests.faults.job import spark_session

    spark: Any = spark_session()
    options = {}
    if args.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = args.max_offsets_per_trigger
    query = start(
        read(spark, args.bootstrap_servers, args.topic, **options),
        job=args.job,
        checkpoint_location=args.checkpoint_location,
        output_table=args.output_table,
    )
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
