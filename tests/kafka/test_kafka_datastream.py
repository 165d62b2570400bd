"""A PyFlink job reading Kafka (tests/pyflink/jobs/kafka_clicks.py, imports changed only) runs
on Spark's Kafka source against the test broker, batch and streaming, with Flink's output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kafka import KafkaProducer

from scripts.kafka_broker import KafkaBroker
from statecore.config import StatecoreConfig
from statecore.pyflink.datastream import RuntimeExecutionMode
from tests.pyflink.jobs.kafka_clicks import kafka_clicks

pytestmark = pytest.mark.spark

CLICKS = [("ann", 1000), ("bob", 2000), ("ann", 3000), ("ann", 4000)]
EXPECTED = ["(ann,1,1000)", "(bob,1,2000)", "(ann,2,3000)", "(ann,3,4000)"]
"""Each click's running count with its Kafka timestamp as event time, in the topic's order (one
partition, parallelism 1)."""


def _produce(broker: KafkaBroker, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all")
    for user, ts in CLICKS:
        producer.send(topic, value=user.encode(), timestamp_ms=ts).get(timeout=30)
    producer.close()


def test_datastream_kafka_source_streaming(
    spark: Any,
    statecore_home: StatecoreConfig,
    kafka_broker: KafkaBroker,
    new_topic: Callable[[int], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = new_topic(1)
    _produce(kafka_broker, topic)
    kafka_clicks(kafka_broker.bootstrap_servers, topic)
    assert capsys.readouterr().out.splitlines() == EXPECTED


def test_datastream_kafka_source_batch(
    spark: Any,
    statecore_home: StatecoreConfig,
    kafka_broker: KafkaBroker,
    new_topic: Callable[[int], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """BATCH: Flink groups by key; each key's lines keep their order."""
    topic = new_topic(1)
    _produce(kafka_broker, topic)
    kafka_clicks(kafka_broker.bootstrap_servers, topic, mode=RuntimeExecutionMode.BATCH)
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == sorted(EXPECTED)
    assert [line for line in lines if "ann" in line] == [EXPECTED[0], *EXPECTED[2:]]
