"""A new query of a Kafka stream started from a savepoint (``keyed_stream(restore_from=...)``,
``startingOffsets`` from :func:`~statecore.spark.savepoint_offsets`) continues where the
savepoint's state ends: output and state match what the topic holds, each record once, also when
the new query's first micro-batch fails after restoring the savepoint and runs again. The
Kafka examples of docs/streaming.md run as written, the broker, topic and ``/data`` replaced."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from itertools import accumulate
from pathlib import Path
from typing import Any

import duckdb
import pytest
from duckdb_extensions import import_extension
from pyspark.errors import StreamingQueryException

from scripts.kafka_broker import KafkaBroker
from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus
from statecore.checkpoint.points import RestorePoint, load_savepoint
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError, RestoreWouldDiscardError
from statecore.ops.savepoint import take_savepoint
from statecore.query import open_views
from statecore.spark import keyed_stream, savepoint_offsets
from statecore.spark.stream import STREAM_METADATA
from tests.ops.statebuilder import Table, value_rows, write_checkpoint

from .kafka_job import OUTPUT, Totals, produce, read, start
from .test_kafka_stream import (
    Click,
    as_ints,
    clicks,
    completed,
    expected_state,
    output_rows,
    recorded_offsets,
    state,
    topic_records,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "streaming.md"


def kafka_examples() -> list[str]:
    """The Python blocks of the Kafka section of docs/streaming.md: a query, then a new query
    from a savepoint of it."""
    section = DOCS.read_text().split("\n### Kafka\n", 1)[1].split("\n### ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def run_example(code: str, namespace: dict[str, Any], servers: str, topic: str, data: Path) -> None:
    assert code.count("broker-1:9092,broker-2:9092") == 1
    assert code.count('.option("subscribe", "clicks")') == 1
    code = code.replace("broker-1:9092,broker-2:9092", servers)
    code = code.replace('.option("subscribe", "clicks")', f'.option("subscribe", "{topic}")')
    code = code.replace('"/data/', f'"{data}/')
    exec(compile(code, f"{DOCS}:Kafka", "exec"), namespace)


def finish(query: Any) -> None:
    query.awaitTermination(timeout=300)
    assert query.exception() is None, query.exception()
    query.stop()


def checkpoint_kinds(config: StatecoreConfig, job: str) -> list[tuple[CheckpointKind, int]]:
    """The job's completed checkpoints in completion order: kind and id."""
    with Catalog.connect(config.catalog_url) as catalog:
        done = catalog.list_checkpoints(job, status=CheckpointStatus.COMPLETED)
    done.sort(key=lambda c: (c.completed_at, c.checkpoint_id))
    return [(c.kind, c.checkpoint_id) for c in done]


def running_totals(*rounds: list[Click]) -> list[tuple[str, float]]:
    """Per user, the running total after each of their clicks, a round after the other and in
    event-time order in each: the output of the docs' ``Totals``, each click once."""
    sent = [c for clicks_ in rounds for c in sorted(clicks_, key=lambda c: c[2])]
    out = []
    for user in {u for u, _, _ in sent}:
        out += [(user, float(t)) for t in accumulate(a for u, a, _ in sent if u == user)]
    return sorted(out)


def test_kafka_new_query_from_a_savepoint_continues_where_it_left_off(
    spark: Any,
    kafka_broker: KafkaBroker,
    new_topic: Callable[[int], str],
    statecore_home: StatecoreConfig,
    tmp_path: Path,
) -> None:
    """The docs' Kafka query over a first round of clicks; then their savepoint example, after
    a second round: the new query restores the savepoint and reads only the second round."""
    topic, servers = new_topic(3), kafka_broker.bootstrap_servers
    query_example, savepoint_example = kafka_examples()
    namespace: dict[str, Any] = {"__name__": "docs_kafka", "spark": spark}
    first = clicks(90, users=7, seed=20)
    produce(servers, topic, first)
    run_example(query_example, namespace, servers, topic, tmp_path)
    (before,) = completed(statecore_home, "clicks")
    second = clicks(60, users=9, seed=21)
    produce(servers, topic, second)
    run_example(savepoint_example, namespace, servers, topic, tmp_path)

    records = topic_records(kafka_broker, topic)
    assert sorted(records.values()) == sorted((u, a) for u, a, _ in first + second)
    con = duckdb.connect()
    import_extension("delta", con=con)
    out = con.execute(f"SELECT user_id, total FROM delta_scan('{tmp_path}/out/totals')").fetchall()
    con.close()
    assert sorted(out) == running_totals(first, second), "each click once, on the saved state"
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        views = open_views(catalog, jobs=["clicks"])
        totals = views.sql("SELECT key, value FROM clicks.total").to_pylist()
        views.connection.close()
    expected = {u: float(t) for u, (_, t) in expected_state(records).items()}
    assert {r["key"]: r["value"] for r in totals} == expected

    savepoint = namespace["savepoint"]
    starting = json.loads(savepoint_offsets(savepoint))
    (end,) = recorded_offsets(before)["offsets"]["end"]
    assert starting == end and sum(as_ints(starting, topic).values()) == 90
    kinds = checkpoint_kinds(statecore_home, "clicks")
    assert [k for k, _ in kinds] == [
        CheckpointKind.CHECKPOINT,
        CheckpointKind.MAINTENANCE,  # micro-batch 0 of the new query restored the savepoint
        CheckpointKind.CHECKPOINT,
    ]
    latest = kinds[-1][1]
    assert latest == before.checkpoint_id + 1, "micro-batch 0 of the new query, above the job's"
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        after = recorded_offsets(catalog.get_checkpoint("clicks", latest))
    assert after["batch_id"] == 0 and after["offsets"]["start"] is None
    assert sum(as_ints(after["offsets"]["end"][0], topic).values()) == 150
    location = tmp_path / "offsets" / "clicks-v2"
    assert json.loads((location / STREAM_METADATA).read_text()) == {
        "job": "clicks",
        "checkpoint_id_base": before.checkpoint_id + 1,
        "restore_from": savepoint,
    }

    # the old query's location belongs to a query that started from the job's checkpoints
    stream = namespace["clicks"]
    args: dict[str, Any] = {
        "key": "user_id",
        "function": namespace["Totals"](),
        "output_schema": OUTPUT,
        "job": "clicks",
        "restore_from": savepoint,
    }
    old = str(tmp_path / "offsets" / "clicks")
    with pytest.raises(ConfigError, match="give the new query a new checkpoint location"):
        keyed_stream(stream, checkpoint_location=old, **args)
    # the job went on after the savepoint: a third query from it would discard that
    with pytest.raises(RestoreWouldDiscardError, match="would discard checkpoint"):
        keyed_stream(stream, checkpoint_location=str(tmp_path / "v3"), **args)
    assert not (tmp_path / "v3" / STREAM_METADATA).exists()


class FailingOnce(Totals):
    """``Totals`` failing every record while the file ``switch`` exists."""

    def __init__(self, switch: str) -> None:
        super().__init__()
        self.switch = switch

    def process_element(self, value: Any, ctx: Any) -> Iterator[tuple[Any, ...]]:
        if os.path.exists(self.switch):
            raise RuntimeError("injected failure")
        yield from super().process_element(value, ctx)


def test_kafka_replay_of_the_first_micro_batch_restores_the_savepoint_again(
    spark: Any,
    kafka_broker: KafkaBroker,
    new_topic: Callable[[int], str],
    statecore_home: StatecoreConfig,
    tmp_path: Path,
) -> None:
    """The new query's micro-batch 0 restores the savepoint (a maintenance checkpoint), then
    fails. Restarted (without ``restore_from``: the checkpoint location keeps it), Spark replays
    micro-batch 0, which restores the savepoint again instead of refusing to discard the first
    restore; every record once."""
    topic, servers = new_topic(2), kafka_broker.bootstrap_servers
    out = str(tmp_path / "out")
    produce(servers, topic, clicks(40, seed=30))
    first = read(spark, servers, topic)
    finish(start(first, job="kagain", checkpoint_location=str(tmp_path / "q1"), output_table=out))
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        point = take_savepoint(statecore_home, catalog, "kagain", name="sp")
    produce(servers, topic, clicks(30, users=5, seed=31))
    switch = tmp_path / "fail"
    switch.touch()

    def new_query(**restore: Any) -> Any:
        return keyed_stream(
            read(spark, servers, topic, startingOffsets=savepoint_offsets(point)),
            key="user",
            function=FailingOnce(str(switch)),
            output_schema=OUTPUT,
            job="kagain",
            checkpoint_location=str(tmp_path / "q2"),
            output_table=out,
            event_time="ts",
            trigger={"availableNow": True},
            parallelism=2,
            **restore,
        )

    query = new_query(restore_from=point.savepoint)
    with pytest.raises(StreamingQueryException, match="injected failure"):
        query.awaitTermination(timeout=300)
    query.stop()
    assert [k for k, _ in checkpoint_kinds(statecore_home, "kagain")] == [
        CheckpointKind.CHECKPOINT,
        CheckpointKind.MAINTENANCE,
    ]
    assert len(output_rows(tmp_path / "out")) == 40
    switch.unlink()
    finish(new_query())

    records = topic_records(kafka_broker, topic)
    rows = output_rows(tmp_path / "out")
    assert sorted((r[1], r[2]) for r in rows) == sorted(records) and len(rows) == 70
    assert state(statecore_home, "kagain") == expected_state(records)
    assert [k for k, _ in checkpoint_kinds(statecore_home, "kagain")] == [
        CheckpointKind.CHECKPOINT,
        CheckpointKind.MAINTENANCE,
        CheckpointKind.MAINTENANCE,  # the replay restored the savepoint again
        CheckpointKind.CHECKPOINT,
    ]


def test_kafka_bad_input_savepoint_offsets_of_a_batch_savepoint_several_sources_or_a_file_source(
    statecore_home: StatecoreConfig,
) -> None:
    """No broker, no Spark: a savepoint of a batch checkpoint keeps no offsets; a stream of
    several sources needs ``source=``; a file source's offsets are not Kafka's."""
    write_checkpoint(statecore_home, "batch", 1, {"total": Table(value_rows({"u1": 1.0}))})
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        saved = take_savepoint(statecore_home, catalog, "batch", name="daily")
    assert saved.savepoint is not None
    with pytest.raises(ConfigError, match=r"savepoint 'daily' of job 'batch' .* no stream offsets"):
        savepoint_offsets(saved.savepoint)

    def taken_after(end: list[Any]) -> RestorePoint:
        identity = {"batch_id": 4, "offsets": {"start": None, "end": end}}
        point = replace(saved, input_identity="given:" + json.dumps(identity))
        assert saved.savepoint is not None
        kept = RestorePoint.from_metadata(point.to_metadata(), saved.savepoint)
        assert kept.input_identity == point.input_identity  # _savepoint.json keeps it
        return point

    kafka = {"clicks": {"0": 12, "1": 7}}
    assert json.loads(savepoint_offsets(taken_after([kafka]))) == kafka
    both = taken_after([kafka, {"logOffset": 3}])
    with pytest.raises(ConfigError, match=r"read 2 sources.*source=0: Kafka, topic\(s\) clicks"):
        savepoint_offsets(both)
    assert json.loads(savepoint_offsets(both, source=0)) == kafka
    with pytest.raises(ConfigError, match="source 1 .* is not a Kafka source"):
        savepoint_offsets(both, source=1)
    with pytest.raises(ConfigError, match="read 2 source"):
        savepoint_offsets(both, source=2)
    with pytest.raises(ConfigError, match="recorded no stream offsets"):
        savepoint_offsets(replace(saved, input_identity="rows:3:0123abcd"))
    assert load_savepoint(saved.savepoint).input_identity is None
