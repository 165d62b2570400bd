"""``keyed_stream`` over Spark's Kafka source against the session's broker: output and state
match what the topic holds, each micro-batch's offsets are its checkpoint's input identity, a
restart continues from Spark's checkpoint location without doubling, a replay with other
offsets is refused, and a partition added mid-stream is read."""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest
from duckdb_extensions import import_extension
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewPartitions
from pyspark.errors import StreamingQueryException

from scripts.kafka_broker import KafkaBroker
from statecore.catalog import Catalog, CheckpointStatus
from statecore.catalog.records import CheckpointRecord
from statecore.config import StatecoreConfig
from statecore.spark.stream import batch_offsets

from .kafka_job import produce, read, start

pytestmark = pytest.mark.spark

Click = tuple[str, int, int]


def clicks(n: int, *, users: int = 12, seed: int = 0) -> list[Click]:
    """``n`` clicks of ``users`` users, one ms apart, from now."""
    rng = random.Random(seed)
    since = time.time_ns() // 1_000_000
    return [(f"user-{rng.randrange(users)}", rng.randrange(1, 100), since + i) for i in range(n)]


def topic_records(broker: KafkaBroker, topic: str) -> dict[tuple[int, int], tuple[str, int]]:
    """Every record of ``topic``: ``(partition, offset) -> (key, amount)``, read back by a
    consumer of the test's own."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers)
    partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    ends = consumer.end_offsets(partitions)
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    records = {}
    deadline = time.monotonic() + 120
    while len(records) < sum(ends.values()):
        assert time.monotonic() < deadline, f"read {len(records)} of {ends} from {topic}"
        for batch in consumer.poll(timeout_ms=5_000).values():
            for r in batch:
                records[(r.partition, r.offset)] = (r.key.decode(), json.loads(r.value)["amount"])
    consumer.close()
    return records


def output_rows(table: Path) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    import_extension("delta", con=con)
    rows = con.execute(
        f"SELECT user, partition, \"offset\", count, total FROM delta_scan('{table}')"
    ).fetchall()
    con.close()
    return sorted(rows)


def state(config: StatecoreConfig, job: str) -> dict[str, tuple[int, int]]:
    """``user -> (count, total)`` from the latest checkpoint, through statecore's SQL views."""
    from statecore.query import open_views

    with Catalog.connect(config.catalog_url) as catalog:
        views = open_views(catalog, jobs=[job])
        rows = views.sql(
            f"SELECT c.key, c.value AS count, t.value AS total FROM {job}.count c "
            f"JOIN {job}.total t USING (key)"
        ).to_pylist()
        views.connection.close()
    return {r["key"]: (r["count"], r["total"]) for r in rows}


def expected_state(records: dict[tuple[int, int], tuple[str, int]]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for user, amount in records.values():
        count, total = out.get(user, (0, 0))
        out[user] = (count + 1, total + amount)
    return out


def completed(config: StatecoreConfig, job: str) -> list[CheckpointRecord]:
    with Catalog.connect(config.catalog_url) as catalog:
        return sorted(
            catalog.list_checkpoints(job, status=CheckpointStatus.COMPLETED),
            key=lambda c: c.checkpoint_id,
        )


def recorded_offsets(checkpoint: CheckpointRecord) -> dict[str, Any]:
    """The input identity statecore recorded: ``{"batch_id": n, "offsets": {...}}``."""
    assert checkpoint.input_identity is not None
    kind, _, fingerprint = checkpoint.input_identity.partition(":")
    assert kind == "given", checkpoint.input_identity
    parsed: dict[str, Any] = json.loads(fingerprint)
    return parsed


def as_ints(offsets: dict[str, dict[str, int]], topic: str) -> dict[int, int]:
    return {int(p): o for p, o in offsets[topic].items()}


def run(
    spark: Any, broker: KafkaBroker, topic: str, tmp_path: Path, job: str, **options: Any
) -> None:
    stream = read(spark, broker.bootstrap_servers, topic, **options)
    query = start(
        stream,
        job=job,
        checkpoint_location=str(tmp_path / "offsets"),
        output_table=str(tmp_path / "out"),
    )
    query.awaitTermination(timeout=300)
    assert query.exception() is None, query.exception()
    assert not query.isActive
    query.stop()


def test_kafka_stream_output_state_and_offsets_match_the_topic(
    spark: Any,
    kafka_broker: KafkaBroker,
    new_topic: Callable[[int], str],
    statecore_home: StatecoreConfig,
    tmp_path: Path,
) -> None:
    topic = new_topic(3)
    produce(kafka_broker.bootstrap_servers, topic, clicks(300))
    run(spark, kafka_broker, topic, tmp_path, "kclicks", maxOffsetsPerTrigger=120)

    records = topic_records(kafka_broker, topic)
    assert len(records) == 300 and {p for p, _ in records} == {0, 1, 2}
    out = output_rows(tmp_path / "out")
    assert sorted((r[1], r[2]) for r in out) == sorted(records), "each record once"
    assert all(records[(r[1], r[2])][0] == r[0] for r in out), "keyed by the record key"
    assert state(statecore_home, "kclicks") == expected_state(records)

    checkpoints = completed(statecore_home, "kclicks")
    assert [c.checkpoint_id for c in checkpoints] == list(range(len(checkpoints)))
    ends: list[dict[int, int]] = []
    for c in checkpoints:
        identity = recorded_offsets(c)
        assert identity["batch_id"] == c.checkpoint_id
        assert identity["offsets"] == batch_offsets(str(tmp_path / "offsets"), c.checkpoint_id)
        ((end,), start_offsets) = identity["offsets"]["end"], identity["offsets"]["start"]
        if c.checkpoint_id == 0:
            assert start_offsets is None, "the first micro-batch starts at startingOffsets"
        else:
            assert [as_ints(o, topic) for o in start_offsets] == [ends[-1]]
        ends.append(as_ints(end, topic))
    sizes = [sum(e.values()) - sum(b.values()) for b, e in zip([{}, *ends], ends, strict=False)]
    assert len(sizes) >= 3 and max(sizes) <= 120 and sum(sizes) == 300, sizes
    assert ends[-1] == {p: 1 + max(o for q, o in records if q == p) for p in range(3)}


def test_kafka_stream_restart_continues_from_the_checkpoint_location_without_doubling(
    spark: Any,
    kafka_broker: KafkaBroker,
    new_topic: Callable[[int], str],
    statecore_home: StatecoreConfig,
    tmp_path: Path,
) -> None:
    topic = new_topic(3)
    produce(kafka_broker.bootstrap_servers, topic, clicks(150, seed=1))
    run(spark, kafka_broker, topic, tmp_path, "krestart")
    first = completed(statecore_home, "krestart")
    produce(kafka_broker.bootstrap_servers, topic, clicks(150, users=20, seed=7))
    run(spark, kafka_broker, topic, tmp_path, "krestart")  # the same checkpoint location

    records = topic_records(kafka_broker, topic)
    out = output_rows(tmp_path / "out")
    assert sorted((r[1], r[2]) for r in out) == sorted(records) and len(out) == 300
    assert state(statecore_home, "krestart") == expected_state(records)
    checkpoints = completed(statecore_home, "krestart")
    assert [c.checkpoint_id for c in checkpoints] == [0, 1] and len(first) == 1
    after = recorded_offsets(checkpoints[1])["offsets"]
    assert after["start"] == recorded_offsets(first[0])["offsets"]["end"]
    assert sum(as_ints(after["end"][0], topic).values()) == 300


def test_kafka_replay_with_other_offsets_under_the_same_id_raises_replay_mismatch(
    spark: Any,
    kafka_broker: KafkaBroker,
    new_topic: Callable[[int], str],
    statecore_home: StatecoreConfig,
    tmp_path: Path,
) -> None:
    """Spark's offset and commit logs lost (statecore.json and the source's start kept): Spark
    plans micro-batch 0 again, now over more records, and statecore refuses it instead of
    taking it for a replay of checkpoint 0 and dropping the new records."""
    topic = new_topic(3)
    produce(kafka_broker.bootstrap_servers, topic, clicks(100, seed=2))
    run(spark, kafka_broker, topic, tmp_path, "kmismatch")
    before = state(statecore_home, "kmismatch")
    for log in ("offsets", "commits"):
        shutil.rmtree(tmp_path / "offsets" / log)
    produce(kafka_broker.bootstrap_servers, topic, clicks(50, seed=3))

    stream = read(spark, kafka_broker.bootstrap_servers, topic)
    query = start(
        stream,
        job="kmismatch",
        checkpoint_location=str(tmp_path / "offsets"),
        output_table=str(tmp_path / "out"),
    )
    with pytest.raises(StreamingQueryException, match="ReplayMismatchError"):
        query.awaitTermination(timeout=300)
    query.stop()
    assert "checkpoint 0 of job 'kmismatch'" in str(query.exception())
    assert state(statecore_home, "kmismatch") == before
    assert len(output_rows(tmp_path / "out")) == 100
    assert [c.checkpoint_id for c in completed(statecore_home, "kmismatch")] == [0]


def test_kafka_partition_added_mid_stream_is_read(
    spark: Any,
    kafka_broker: KafkaBroker,
    new_topic: Callable[[int], str],
    statecore_home: StatecoreConfig,
    tmp_path: Path,
) -> None:
    topic = new_topic(2)
    produce(kafka_broker.bootstrap_servers, topic, clicks(60, seed=4))
    run(spark, kafka_broker, topic, tmp_path, "kgrow")
    admin = kafka_broker.admin()
    try:
        admin.create_partitions({topic: NewPartitions(total_count=3)})
    finally:
        admin.close()
    produce(kafka_broker.bootstrap_servers, topic, clicks(40, seed=5), partition=2)
    produce(kafka_broker.bootstrap_servers, topic, clicks(20, seed=6))
    run(spark, kafka_broker, topic, tmp_path, "kgrow")

    records = topic_records(kafka_broker, topic)
    assert sum(1 for p, _ in records if p == 2) >= 40
    out = output_rows(tmp_path / "out")
    assert sorted((r[1], r[2]) for r in out) == sorted(records) and len(out) == 120
    assert state(statecore_home, "kgrow") == expected_state(records)
    first, second = (recorded_offsets(c)["offsets"] for c in completed(statecore_home, "kgrow"))
    assert set(as_ints(first["end"][0], topic)) == {0, 1}
    assert set(as_ints(second["end"][0], topic)) == {0, 1, 2}


def read_up_to(config: StatecoreConfig, job: str, topic: str, offsets: int) -> None:
    """Until a completed checkpoint of ``job`` ends at ``offsets`` records of ``topic``."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            checkpoints = completed(config, job)
        except Exception:  # the catalog or the job not there yet
            checkpoints = []
        ends = [recorded_offsets(c)["offsets"]["end"][0] for c in checkpoints]
        if any(sum(as_ints(e, topic).values()) >= offsets for e in ends):
            return
        time.sleep(0.5)
    raise AssertionError(f"{job} did not read {offsets} records of {topic} in 180 s")


def test_kafka_processing_time_trigger_skips_idle_micro_batches(
    spark: Any,
    kafka_broker: KafkaBroker,
    new_topic: Callable[[int], str],
    statecore_home: StatecoreConfig,
    tmp_path: Path,
) -> None:
    """With a ``processingTime`` trigger the query also reads the ``rate`` ticks: micro-batches
    without Kafka records are skipped (no checkpoint), and a checkpoint's offsets are the
    topic's only."""
    topic = new_topic(2)
    produce(kafka_broker.bootstrap_servers, topic, clicks(40, seed=8))
    query = start(
        read(spark, kafka_broker.bootstrap_servers, topic),
        job="kticks",
        checkpoint_location=str(tmp_path / "offsets"),
        output_table=str(tmp_path / "out"),
        trigger={"processingTime": "1 second"},
    )
    try:  # processAllAvailable would wait for the ticks forever
        read_up_to(statecore_home, "kticks", topic, 40)
        time.sleep(3)  # ticks only: micro-batches without records
        produce(kafka_broker.bootstrap_servers, topic, clicks(20, seed=9))
        read_up_to(statecore_home, "kticks", topic, 60)
        time.sleep(2)
        batches = query.lastProgress["batchId"] + 1
    finally:
        query.stop()

    records = topic_records(kafka_broker, topic)
    out = output_rows(tmp_path / "out")
    assert sorted((r[1], r[2]) for r in out) == sorted(records) and len(out) == 60
    checkpoints = completed(statecore_home, "kticks")
    assert 2 <= len(checkpoints) < batches, (len(checkpoints), batches)
    for c in checkpoints:
        offsets = recorded_offsets(c)["offsets"]
        assert len(offsets["end"]) == 1, "the ticks are not part of the input identity"
        assert offsets["start"] != offsets["end"], "a checkpoint only for records"
    (last,) = recorded_offsets(checkpoints[-1])["offsets"]["end"]
    assert sum(as_ints(last, topic).values()) == 60


def test_kafka_bad_input_a_record_without_a_key_fails_the_micro_batch_and_loses_nothing(
    spark: Any,
    kafka_broker: KafkaBroker,
    new_topic: Callable[[int], str],
    statecore_home: StatecoreConfig,
    tmp_path: Path,
) -> None:
    """A record with a null key stops the stream with an error naming the key column; nothing
    of its micro-batch is committed. Restarted with the null keys filtered out (the error's
    advice), the same micro-batch runs again over the same offsets, every keyed record once."""
    topic = new_topic(1)
    produce(kafka_broker.bootstrap_servers, topic, [("u1", 5, 1000), ("u2", 7, 2000)])
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers, acks="all")
    producer.send(topic, key=None, value=b'{"amount": 100}', timestamp_ms=3000).get(timeout=30)
    producer.close()
    produce(kafka_broker.bootstrap_servers, topic, [("u1", 1, 4000)])
    location, out = str(tmp_path / "offsets"), str(tmp_path / "out")

    query = start(read(spark, kafka_broker.bootstrap_servers, topic), job="knull",
                  checkpoint_location=location, output_table=out)  # fmt: skip
    with pytest.raises(StreamingQueryException, match="null key"):
        query.awaitTermination(timeout=300)
    query.stop()
    assert completed(statecore_home, "knull") == []
    assert not (tmp_path / "out" / "_delta_log").exists()

    keyed = read(spark, kafka_broker.bootstrap_servers, topic).where("user IS NOT NULL")
    query = start(keyed, job="knull", checkpoint_location=location, output_table=out)
    query.awaitTermination(timeout=300)
    assert query.exception() is None, query.exception()
    query.stop()
    assert [(r[0], r[2], r[4]) for r in output_rows(tmp_path / "out")] == [
        ("u1", 0, 5),
        ("u1", 3, 6),
        ("u2", 1, 7),
    ]
    assert state(statecore_home, "knull") == {"u1": (2, 6), "u2": (1, 7)}
