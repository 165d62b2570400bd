"""Exactly-once of a Kafka stream under faults, against the session's broker: the driver
SIGKILLed at a kill point in the middle of a micro-batch (:mod:`statecore.snapshot.faults`) and
the query started again on its checkpoint location and home, as an Airflow retry runs it; the
broker stopped and started again (same port, same log folder) while the query runs. Either way
the output table holds each record of the topic once, each user's running counts go 1, 2, ...
without a gap or a repeat, the state is what the topic's records give, and the completed
checkpoints' offsets follow one another from the topic's start to its end."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.query import StreamingQuery

from scripts.kafka_broker import KafkaBroker
from statecore.config import StatecoreConfig
from tests.faults.harness import LEASE_TIMEOUT, RECOVERY_RETRY_SECONDS, start_armed

from .kafka_job import produce, read, start
from .test_kafka_stream import (
    as_ints,
    clicks,
    completed,
    expected_state,
    output_rows,
    read_up_to,
    recorded_offsets,
    run,
    state,
    topic_records,
)

pytestmark = pytest.mark.spark

RECORDS = 240
PER_TRIGGER = 80
"""``maxOffsetsPerTrigger``: three micro-batches of 80 records."""
KILL_POINTS = [
    # a task of micro-batch 1 before its snapshot: a task passes the point 3 or 4 times (the
    # watermark, each Arrow batch of up to 40 records, the end), and its Python worker ran one
    # task of micro-batch 0 before; nothing of the micro-batch committed, Spark runs it again
    "task:process:5",
    # micro-batch 1's output rows committed to the Delta table, its state not: the retry rolls
    # that output back and commits it again
    "output:commit:after:2",
    # micro-batch 1 completed in the catalog, Spark's commits/1 not written: Spark runs it again
    # over the same offsets, a replay of a completed checkpoint (a no-op)
    "catalog:complete:after:2",
]
_RETRIED = ("ConcurrentRunError", "MaintenanceLockedError")
"""What a retry meets while the dead driver's lease has not expired."""


def driver(broker: KafkaBroker, topic: str, tmp_path: Path, job: str) -> list[str]:
    """The stream in a driver of its own (:mod:`tests.kafka.kafka_job`), on the checkpoint
    location and output table :func:`~tests.kafka.test_kafka_stream.run` uses."""
    return [
        sys.executable,
        "-m",
        "tests.kafka.kafka_job",
        "--bootstrap-servers",
        broker.bootstrap_servers,
        "--topic",
        topic,
        "--job",
        job,
        "--checkpoint-location",
        str(tmp_path / "offsets"),
        "--output-table",
        str(tmp_path / "out"),
        "--max-offsets-per-trigger",
        str(PER_TRIGGER),
    ]


def micro_batches(checkpoint_location: Path) -> tuple[set[int], set[int]]:
    """The micro-batches in Spark's offset log (planned) and in its commit log (finished)."""
    return tuple(  # type: ignore[return-value]
        {int(f.name) for f in (checkpoint_location / log).iterdir() if f.name.isdigit()}
        for log in ("offsets", "commits")
    )


def retried(spark: Any, broker: KafkaBroker, topic: str, tmp_path: Path, job: str) -> None:
    """The query again on its checkpoint location, until the topic is drained, started again
    while it meets the dead driver's lease (as a retry would come again)."""
    deadline = time.monotonic() + RECOVERY_RETRY_SECONDS
    while True:
        try:
            run(spark, broker, topic, tmp_path, job, maxOffsetsPerTrigger=PER_TRIGGER)
            return
        except StreamingQueryException as exc:
            if not any(name in str(exc) for name in _RETRIED) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def assert_exactly_once(
    config: StatecoreConfig, broker: KafkaBroker, topic: str, out: Path, job: str, n: int
) -> None:
    records = topic_records(broker, topic)
    assert len(records) == n
    rows = output_rows(out)
    assert sorted((r[1], r[2]) for r in rows) == sorted(records), "each record once"
    assert all(records[(r[1], r[2])][0] == r[0] for r in rows), "keyed by the record key"
    counts: dict[str, list[int]] = {}
    for user, _, _, count, _ in rows:
        counts.setdefault(user, []).append(count)
    expected = expected_state(records)
    assert {u: sorted(c) for u, c in counts.items()} == {
        u: list(range(1, c + 1)) for u, (c, _) in expected.items()
    }, "each row counted once in its user's running count"
    assert state(config, job) == expected

    checkpoints = completed(config, job)
    ids = [c.checkpoint_id for c in checkpoints]
    assert ids == sorted(set(ids)) and ids[0] == 0, ids
    end = None
    for c in checkpoints:
        offsets = recorded_offsets(c)["offsets"]
        assert offsets["start"] == end, f"checkpoint {c.checkpoint_id} starts where the last ends"
        end = offsets["end"]
    assert end is not None
    (last,) = end
    partitions = {p for p, _ in records}
    assert as_ints(last, topic) == {p: 1 + max(o for q, o in records if q == p) for p in partitions}


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kafka_driver_killed_mid_micro_batch_restarts_from_the_checkpoint_location_exactly_once(
    point: str,
    spark: Any,
    kafka_broker: KafkaBroker,
    new_topic: Callable[[int], str],
    statecore_home: StatecoreConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STATECORE_LEASE_TIMEOUT", LEASE_TIMEOUT)  # as the driver has it
    topic = new_topic(3)
    produce(kafka_broker.bootstrap_servers, topic, clicks(RECORDS, seed=11))
    command = driver(kafka_broker, topic, tmp_path, "kkill")
    killed = start_armed(command, statecore_home, point=point, marker=tmp_path / "fired").finish()

    assert killed.fired, f"{point} was never reached:\n{killed.log[-3000:]}"
    assert killed.returncode == -signal.SIGKILL, killed.log[-3000:]
    planned, finished = micro_batches(tmp_path / "offsets")
    killed_in = max(planned)
    assert killed_in >= 1 and finished == set(range(killed_in)), "killed mid-stream, mid-batch"
    retried(spark, kafka_broker, topic, tmp_path, "kkill")
    assert_exactly_once(statecore_home, kafka_broker, topic, tmp_path / "out", "kkill", RECORDS)
    planned, finished = micro_batches(tmp_path / "offsets")
    assert planned == finished and len(planned) >= 3, "every micro-batch finished"


def ticking(spark: Any, broker: KafkaBroker, topic: str, tmp_path: Path) -> StreamingQuery:
    """The stream with a ``processingTime`` trigger (it runs until stopped), at most 50 records
    a micro-batch, every checkpoint kept."""
    return start(
        read(spark, broker.bootstrap_servers, topic, maxOffsetsPerTrigger=50),
        job="kbroker",
        checkpoint_location=str(tmp_path / "offsets"),
        output_table=str(tmp_path / "out"),
        trigger={"processingTime": "1 second"},
        retain_checkpoints=None,
    )


def read_so_far(config: StatecoreConfig, topic: str) -> int:
    """The records of ``topic`` the completed checkpoints of ``kbroker`` end at."""
    (end,) = recorded_offsets(completed(config, "kbroker")[-1])["offsets"]["end"]
    return sum(as_ints(end, topic).values())


def test_kafka_broker_restarted_mid_stream_loses_and_doubles_nothing(
    spark: Any,
    kafka_broker: KafkaBroker,
    new_topic: Callable[[int], str],
    statecore_home: StatecoreConfig,
    tmp_path: Path,
) -> None:
    """The broker stops once the first micro-batch of a backlog of 150 records completed and
    starts again (same port, same log folder) 5 seconds later: Spark's Kafka source waits for
    it (a request for offsets fails after the admin client's 60-second timeout, three times; a
    fetch after ``kafkaConsumer.pollTimeoutMs``, 120 s), the query stays up and reads on, and
    150 records produced after the restart are read too."""
    topic = new_topic(3)
    produce(kafka_broker.bootstrap_servers, topic, clicks(150, seed=12))
    query = ticking(spark, kafka_broker, topic, tmp_path)
    pid = kafka_broker.process.pid
    try:
        read_up_to(statecore_home, "kbroker", topic, 50)
        with kafka_broker.down():
            time.sleep(5)  # triggers ask the broker for offsets, tasks fetch records
            during = query.isActive, query.exception(), read_so_far(statecore_home, topic)
        after = query.isActive, query.exception()
        produce(kafka_broker.bootstrap_servers, topic, clicks(150, users=20, seed=13))
        read_up_to(statecore_home, "kbroker", topic, 300)
    finally:
        query.stop()
    assert kafka_broker.process.pid != pid and kafka_broker.process.poll() is None
    assert during[:2] == after == (True, None), "the query waited for the broker"
    assert during[2] < 150, "stopped with records still to read"
    assert_exactly_once(statecore_home, kafka_broker, topic, tmp_path / "out", "kbroker", 300)
