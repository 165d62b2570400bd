"""The Kafka example of docs/streaming.md (moved from the README) runs as written against the
session's broker: only the broker addresses and the ``/data`` folder are replaced (by the
broker's address and the test's folder)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest
from duckdb_extensions import import_extension
from kafka.admin import NewTopic

from scripts.kafka_broker import KafkaBroker
from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig

from .kafka_job import produce

pytestmark = pytest.mark.spark

README = Path(__file__).resolve().parents[2] / "docs" / "streaming.md"


def kafka_example() -> str:
    """The first Python block of the Kafka section of docs/streaming.md."""
    section = README.read_text().split("\n### Kafka\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the Kafka section of docs/streaming.md has no Python block"
    return match.group(1)


def test_kafka_readme_example_runs_against_the_broker(
    spark: Any,
    kafka_broker: KafkaBroker,
    statecore_home: StatecoreConfig,
    tmp_path: Path,
) -> None:
    admin = kafka_broker.admin()
    try:
        admin.create_topics([NewTopic("clicks", 3, 1)])
    finally:
        admin.close()
    now = time.time_ns() // 1_000_000
    sent = [(f"user-{i % 7}", i, now + i) for i in range(70)]
    produce(kafka_broker.bootstrap_servers, "clicks", sent)
    code = kafka_example()
    assert code.count("broker-1:9092,broker-2:9092") == 1 and code.count('"/data/') == 2
    code = code.replace("broker-1:9092,broker-2:9092", kafka_broker.bootstrap_servers)
    code = code.replace('"/data/', f'"{tmp_path}/')
    exec(compile(code, f"{README}:Kafka", "exec"), {"__name__": "readme_kafka", "spark": spark})

    con = duckdb.connect()
    import_extension("delta", con=con)
    rows = con.execute(
        f"SELECT user_id, max(total) FROM delta_scan('{tmp_path}/out/totals') GROUP BY user_id"
    ).fetchall()
    con.close()
    expected = {
        f"user-{k}": float(sum(a for u, a, _ in sent if u == f"user-{k}")) for k in range(7)
    }
    assert dict(rows) == expected
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        (checkpoint,) = catalog.list_checkpoints("clicks", status=CheckpointStatus.COMPLETED)
    assert checkpoint.input_identity is not None
    identity = json.loads(checkpoint.input_identity.removeprefix("given:"))
    assert identity["batch_id"] == 0 and identity["offsets"]["start"] is None
    (end,) = identity["offsets"]["end"]
    assert sum(end["clicks"].values()) == 70
