"""The ``streaming_kafka`` DAG on a real Airflow (SQLite, ``dag.test()``), a real Spark query
(spark-submit) and the session's broker: triggered with its defaults and no broker configured
it skips; with ``bootstrap_servers`` and ``topic`` it takes every record of the topic once; run
again through the ``kafka_default`` connection after more records arrived, it takes only
those; records produced during that run's increment (after its query took its input) are read by
the next run, and a run after it with no new record skips before Spark starts.
Output and state are checked against what was produced."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from scripts.kafka_broker import KafkaBroker
from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.ops.streams import read_status
from statecore.query import run_sql
from tests.airflow.dagrun import run_dags
from tests.kafka.kafka_job import send_records

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

JOB = "clickstream_kafka"
Click = tuple[str, str, float, int]  # user, event type, amount, Kafka timestamp (ms)


def send(broker: KafkaBroker, topic: str, n: int, *, seed: int) -> list[Click]:
    """``n`` clicks of 8 users, one ms apart from now, as the job reads them."""
    rng = random.Random(seed)
    since = time.time_ns() // 1_000_000
    clicks = [
        (
            f"user-{rng.randrange(8)}",
            rng.choice(["view", "add_to_cart", "purchase"]),
            float(rng.randrange(1, 200)),
            since + i,
        )
        for i in range(n)
    ]
    send_records(
        broker.bootstrap_servers,
        topic,
        [(user, {"event_type": kind, "amount": amount}, ts) for user, kind, amount, ts in clicks],
    )
    return clicks


def output(home: Path) -> list[Click]:
    table = DeltaTable(str(home / "output" / JOB)).to_pyarrow_table()
    ts = table.column("ts").cast(pa.timestamp("us")).cast(pa.int64()).to_pylist()
    rows = zip(
        table.column("user_id").to_pylist(),
        table.column("event_type").to_pylist(),
        table.column("amount").to_pylist(),
        (t // 1000 for t in ts),
        strict=True,
    )
    return sorted(rows)


def totals(home: Path) -> dict[str, float]:
    """``user -> total_amount`` in the job's latest checkpoint, through the SQL views."""
    config = StatecoreConfig.resolve(home=str(home), env={})
    with Catalog.connect(config.catalog_url) as catalog:
        rows = run_sql(catalog, f"SELECT key, value FROM {JOB}.total_amount", job=JOB)
    return {r["key"]: r["value"] for r in rows.to_pylist()}


def expected_totals(clicks: list[Click]) -> dict[str, float]:
    out: dict[str, float] = {}
    for user, _, amount, _ in clicks:
        out[user] = out.get(user, 0.0) + amount
    return out


def _produce_after_query(
    broker: KafkaBroker, topic: str, home: Path, into: list[Click]
) -> threading.Thread:
    """A thread that produces 10 records to ``topic`` (into ``into``) once a new query of the
    job finished (it took its input: the records are the next run's)."""
    location = str(home / "streaming" / JOB)
    before = read_status(location)

    def produce() -> None:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            status = read_status(location)
            if status is not None and status.state == "FINISHED" and status != before:
                into.extend(send(broker, topic, 10, seed=3))
                return
            time.sleep(0.2)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    return thread


def test_kafka_dag_takes_each_record_once_and_then_only_the_new_ones(
    kafka_broker: KafkaBroker,
    new_topic: Callable[[int], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = tmp_path / "home"
    topic = new_topic(3)
    first = send(kafka_broker, topic, 60, seed=1)
    conf = {
        "bootstrap_servers": kafka_broker.bootstrap_servers,
        "topic": topic,
        "parallelism": 2,
        "max_offsets_per_trigger": 40,
    }
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_DEFAULT", raising=False)
    skipped, ran = run_dags(home, [("streaming_kafka", {}), ("streaming_kafka", conf)])

    # the defaults, no broker configured: skipped before Spark, the reason in the task's log
    assert skipped["state"] == "success"
    assert set(skipped["tasks"].values()) == {"skipped"}, skipped
    assert "no Kafka broker configured" in (home / "dag-runs.log").read_text()

    assert ran["tasks"] == {"check": "success", "increment": "success", "checkpoints": "success"}
    progress = ran["xcom"]["checkpoints"]
    assert progress["state"] == "FINISHED"
    assert progress["completed"] == [0, 1], "60 records at most 40 a micro-batch"
    assert sum(progress["offsets"][topic].values()) == 60
    assert output(home) == sorted(first), "each record once"
    assert totals(home) == pytest.approx(expected_totals(first))

    # more records; the broker now from the connection (the official provider's format)
    second = send(kafka_broker, topic, 30, seed=2)
    connection = {
        "conn_type": "kafka",
        "extra": {"bootstrap.servers": kafka_broker.bootstrap_servers},
    }
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps(connection))
    during: list[Click] = []  # produced during its increment, once its query took its input
    producing = _produce_after_query(kafka_broker, topic, home, during)
    [again] = run_dags(home, [("streaming_kafka", {"topic": topic})], first_minute=2)
    producing.join(timeout=60)
    assert len(during) == 10, "the records were not produced during the increment"

    assert again["xcom"]["check"] == kafka_broker.bootstrap_servers
    progress = again["xcom"]["checkpoints"]
    assert progress["completed"] == [2], "only the new records: one micro-batch"
    assert sum(progress["offsets"][topic].values()) == 90
    assert output(home) == sorted(first + second), "the new records once, the old ones not again"
    assert totals(home) == pytest.approx(expected_totals(first + second))

    # the records produced during that run's increment: the next run reads them; the one after
    # it, with no new record, skips before Spark starts, the reason in its log
    third, idle = run_dags(
        home,
        [("streaming_kafka", {"topic": topic}), ("streaming_kafka", {"topic": topic})],
        first_minute=3,
    )
    assert third["tasks"] == dict.fromkeys(("check", "increment", "checkpoints"), "success")
    assert third["xcom"]["checkpoints"]["completed"] == [3]
    assert sum(third["xcom"]["checkpoints"]["offsets"][topic].values()) == 100
    assert output(home) == sorted(first + second + during), "each record once"
    assert idle["tasks"] == dict.fromkeys(("check", "increment", "checkpoints"), "skipped")
    assert "no new input since run streaming_kafka/" in (home / "dag-runs.log").read_text()
