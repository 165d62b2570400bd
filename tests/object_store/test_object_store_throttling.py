"""S3 throttling (``503 SlowDown``) on the warehouse: the test server answers the next requests
under a prefix with S3's ``SlowDown`` error, and statecore's clients retry them with backoff.

One request throttled three times in a row is beyond the AWS SDK's default (3 attempts, which
pyarrow's filesystem used before): a checkpoint's files, the output's files and a restore's
reads now get through it; delta-rs and DuckDB are given the same bounded budget
(``STATECORE_S3_MAX_ATTEMPTS``). Throttling beyond that budget fails the checkpoint with an
error naming the table and the setting, and loses nothing: its next attempt completes.
The checkpoints run in-process (:mod:`tests.inprocess`, no Spark), with few keys: each file
is a request to the shared server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from statecore import KeyedProcessFunction, ValueStateDescriptor
from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.errors import CheckpointCommitError, ConfigError, SnapshotWriteError
from statecore.query.sql import run_sql
from statecore.runtime import Context, RuntimeContext
from statecore.snapshot.output import OutputTable, OutputWriter
from statecore.snapshot.storage import open_table
from tests.inprocess import run_checkpoint
from tests.object_store.conftest import S3Server

JOB = "orders"
KEYS = [f"k{i}" for i in range(6)]


class Total(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        self.total.update(self.total.value() + value)
        yield ctx.current_key, self.total.value()


def run(config: StatecoreConfig, checkpoint_id: int) -> Any:
    records = [(k, checkpoint_id * 10 + i) for i, k in enumerate(KEYS)]
    return run_checkpoint(
        config, Total(), records, job=JOB, checkpoint_id=checkpoint_id, parallelism=1
    )[1]


def totals(config: StatecoreConfig) -> dict[str, int]:
    with Catalog.connect(config.catalog_url) as catalog:
        rows = run_sql(catalog, f"SELECT key, value FROM {JOB}.total").to_pylist()
    out = {r["key"]: r["value"] for r in rows}
    assert len(out) == len(rows), rows  # no key twice
    return out


def expected(checkpoints: int) -> dict[str, int]:
    return {k: sum(c * 10 + i for c in range(1, checkpoints + 1)) for i, k in enumerate(KEYS)}


def prefix(config: StatecoreConfig, below: str = "") -> str:
    return f"{config.warehouse.removeprefix('s3://')}/{JOB}/{below}"


@pytest.fixture
def throttling(s3_server: S3Server) -> Iterator[S3Server]:
    s3_server.unthrottle()
    yield s3_server
    s3_server.unthrottle()


def test_object_store_checkpoint_completes_while_s3_throttles(
    s3_home: StatecoreConfig, throttling: S3Server
) -> None:
    run(s3_home, 1)
    table = prefix(s3_home, "main/keyed/total/")
    throttling.throttle(f"{table}key_group=", 3, "PUT,POST")  # a snapshot file, 3 times
    throttling.throttle(f"{table}_delta_log/", 3, "PUT")  # the commit's conditional put
    record = run(s3_home, 2)
    throttled = throttling.throttled()
    assert len(throttled) == 6 and len(set(throttled)) == 2, throttled  # 2 requests, 3 times
    assert any("/_delta_log/00000000000000000002.json" in r for r in throttled), throttled
    assert record.status is CheckpointStatus.COMPLETED
    assert totals(s3_home) == expected(2)


def test_object_store_output_commit_while_s3_throttles(
    s3_home: StatecoreConfig, throttling: S3Server
) -> None:
    uri = f"{s3_home.warehouse}/out/clicks"
    schema = pa.schema([("key", pa.string()), ("n", pa.int64())])
    sink = OutputTable(uri, schema, app_id="statecore:out/main")
    root = uri.removeprefix("s3://")
    throttling.throttle(f"{root}/", 3, "PUT,POST")  # the output file, 3 times
    throttling.throttle(f"{root}/_delta_log/", 3, "PUT")  # the table's first commit
    writer = OutputWriter(uri, schema, checkpoint_id=1, subtask=0)
    writer.write(pa.record_batch({"key": KEYS, "n": list(range(len(KEYS)))}, schema=schema))
    written = writer.close()
    assert written is not None
    throttling.throttle(f"{root}/_delta_log/", 3, "PUT")  # the output commit
    assert sink.commit([written], checkpoint_id=1)
    assert len(throttling.throttled()) == 9
    assert not sink.commit([written], checkpoint_id=1)  # committed once
    rows = open_table(uri).to_pyarrow_table().sort_by("key")
    assert rows.to_pylist() == [{"key": k, "n": i} for i, k in enumerate(KEYS)]


def test_object_store_restore_and_sql_read_while_s3_throttles(
    s3_home: StatecoreConfig, throttling: S3Server
) -> None:
    run(s3_home, 1)
    files = prefix(s3_home, "main/keyed/total/key_group=")
    throttling.throttle(files, 3, "GET,HEAD")  # the restore reads a file 3 times throttled
    assert run(s3_home, 2).status is CheckpointStatus.COMPLETED
    assert len(throttling.unthrottle()) == 3
    throttling.throttle(files, 5, "GET,HEAD")  # DuckDB reads its files (4 attempts before)
    assert totals(s3_home) == expected(2)
    assert len(throttling.throttled()) == 5


def test_object_store_throttling_beyond_the_retry_budget_fails_cleanly(
    s3_home: StatecoreConfig, throttling: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two attempts per request: a file throttled twice, then a commit throttled twice, each
    fails its checkpoint naming the table and the setting; the catalog keeps checkpoint 1,
    the state reads as checkpoint 1 left it (a query throttled twice says why it failed), and
    the next attempt completes."""
    run(s3_home, 1)
    monkeypatch.setenv("STATECORE_S3_MAX_ATTEMPTS", "2")
    table = prefix(s3_home, "main/keyed/total/")
    throttling.throttle(f"{table}key_group=", 2, "PUT,POST")
    with pytest.raises(SnapshotWriteError) as write_failed:
        run(s3_home, 2)
    assert len(throttling.throttled()) == 2
    throttling.throttle(f"{table}_delta_log/", 2, "PUT")
    with pytest.raises(CheckpointCommitError) as commit_failed:
        run(s3_home, 2)
    assert len(throttling.unthrottle()) == 4
    for failed in (write_failed, commit_failed):
        message = str(failed.value)
        assert f"{s3_home.warehouse}/{JOB}/main/keyed/total" in message, message
        assert "503 SlowDown through 2 attempts" in message, message
        assert "STATECORE_S3_MAX_ATTEMPTS" in message, message
    with Catalog.connect(s3_home.catalog_url) as catalog:
        assert catalog.latest_checkpoint(JOB).checkpoint_id == 1
        assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.FAILED
    assert totals(s3_home) == expected(1)
    throttling.throttle(prefix(s3_home, "main/keyed/total/key_group="), 2, "GET,HEAD")
    with pytest.raises(ConfigError, match="503 SlowDown through 2 attempts.*orders.total"):
        totals(s3_home)  # a query throttled beyond the budget says so too
    throttling.unthrottle()
    assert run(s3_home, 2).status is CheckpointStatus.COMPLETED
    assert totals(s3_home) == expected(2)


def test_object_store_throttled_commit_applied_but_unanswered_is_not_doubled(
    s3_home: StatecoreConfig, throttling: S3Server
) -> None:
    """The commit's conditional put is applied but answered ``503`` (its outcome unknown to
    the client): delta-rs's retry finds the version taken, by a commit with this checkpoint's
    application transaction. Nothing is committed twice: the checkpoint either completes or
    fails, and then its next attempt completes with every row once."""
    run(s3_home, 1)
    log = prefix(s3_home, "main/keyed/total/_delta_log/")
    throttling.throttle(log, 1, "PUT", applied=True)
    try:
        run(s3_home, 2)
    except CheckpointCommitError:
        assert throttling.unthrottle() == [f"PUT {log}00000000000000000002.json"]
        run(s3_home, 2)
    assert totals(s3_home) == expected(2)
    with Catalog.connect(s3_home.catalog_url) as catalog:
        assert catalog.latest_checkpoint(JOB).checkpoint_id == 2


def test_object_store_throttled_proportional_logged_commit_on_s3(
    s3_home: StatecoreConfig, throttling: S3Server
) -> None:
    """An incremental commit on S3 is statecore's own log entry (the cost of the change, not of
    the table), written with a conditional put that never replaces another writer's commit and
    is retried through throttling; delta-rs and DuckDB read it back."""
    from statecore.snapshot.s3_copy import put_if_absent, s3_client
    from statecore.snapshot.storage import S3Settings

    run(s3_home, 1)
    table = prefix(s3_home, "main/keyed/total/")
    throttling.throttle(f"{table}_delta_log/", 3, "PUT")
    run(s3_home, 2)
    assert len(throttling.unthrottle()) == 3
    run(s3_home, 3)
    uri = f"s3://{table.rstrip('/')}"
    delta = open_table(uri)
    assert delta.version() == 3  # created, then checkpoints 1, 2 and 3
    engines = [entry.get("engineInfo", "") for entry in delta.history(2)]
    assert all(engine.startswith("statecore") for engine in engines), engines
    assert totals(s3_home) == expected(3)
    client = s3_client(S3Settings.from_env(), 1)
    taken = f"{uri}/_delta_log/00000000000000000003.json"
    assert not put_if_absent(client, taken, b"{}")  # another writer's version is never replaced
    assert open_table(uri).version() == 3 and totals(s3_home) == expected(3)
