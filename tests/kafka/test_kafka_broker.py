"""The test broker itself: up, on loopback only, and holding what is produced to it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from scripts import kafka_broker as broker_module
from scripts.kafka_broker import BROKER_JARS, KafkaBroker
from tests.listening import listening


def test_kafka_broker_listens_on_loopback_only(kafka_broker: KafkaBroker) -> None:
    bound = listening(kafka_broker.process.pid)
    assert ("127.0.0.1", kafka_broker.port) in bound
    assert ("127.0.0.1", kafka_broker.controller_port) in bound
    assert {host for host, _ in bound} == {"127.0.0.1"}, bound
    admin = kafka_broker.admin()
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    assert cluster["cluster_id"] == kafka_broker.cluster_id
    assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [
        ("127.0.0.1", kafka_broker.port)
    ]


def test_kafka_topic_holds_keyed_records_by_partition(
    kafka_broker: KafkaBroker, new_topic: Callable[[int], str]
) -> None:
    topic = new_topic(3)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    for i in range(90):
        producer.send(topic, key=f"user-{i % 9}".encode(), value=str(i).encode())
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap_servers)
    partitions = [TopicPartition(topic, p) for p in range(3)]
    assert consumer.partitions_for_topic(topic) == {0, 1, 2}
    ends = consumer.end_offsets(partitions)
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    records = []
    while len(records) < 90:
        for batch in consumer.poll(timeout_ms=5_000).values():
            records.extend(batch)
    consumer.close()
    assert sum(ends.values()) == 90
    assert sorted(int(r.value) for r in records) == list(range(90))
    # one key, one partition (the producer's murmur2 partitioner, as Kafka's Java client)
    by_key: dict[bytes, set[int]] = {}
    for r in records:
        by_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(p) == 1 for p in by_key.values())
    assert len({p for ps in by_key.values() for p in ps}) > 1


@pytest.mark.spark
def test_kafka_broker_jars_stay_off_sparks_classpath(spark: Any) -> None:
    """The broker's JARs (Kafka 4.1, its Scala and Jackson) are a folder of their own; Spark's
    session has its Kafka source and that source's kafka-clients, nothing of the broker."""
    assert any(BROKER_JARS.glob("kafka_2.13-*.jar")), "make jars resolves the broker"
    jars = [Path(j).name for j in spark.conf.get("spark.jars", "").split(",") if j]
    assert any(j.startswith("spark-sql-kafka-0-10_2.13-") for j in jars)
    assert not any(j.startswith(("kafka_2.13-", "kafka-server-", "kafka-raft-")) for j in jars)
    assert not any(str(BROKER_JARS) in j for j in spark.conf.get("spark.jars", "").split(","))
    clients = [j for j in jars if j.startswith("kafka-clients-")]
    assert len(clients) == 1 and not clients[0].startswith("kafka-clients-4."), clients


def test_kafka_broker_cluster_ids_never_start_with_a_dash() -> None:
    """``kafka-storage format -t ID`` takes an id starting with ``-`` for an option (1 random id
    in 64 starts so): the fixture draws ids as Kafka does, never one of those."""
    ids = [broker_module._cluster_id() for _ in range(2000)]
    assert not any(i.startswith("-") for i in ids)
    assert len(set(ids)) == len(ids) and all(len(i) == 22 for i in ids)
