"""Spark SQL over state (delta-spark) against DuckDB's views, and Delta-Spark as a reader (and a
racing writer) of every table statecore writes.

One job holds every kind of state: value (with TTL, a struct, a map, bytes), list, map,
reducing, aggregating, a namespace, event-time timers, operator list and broadcast state. Its
checkpoints are changelog checkpoints, so the latest has pending change files; it writes an
output table. The same queries return the same rows through DuckDB and Spark SQL at a
checkpoint, at an earlier one, at a savepoint, and after the changes are materialized.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyspark
import pytest
from pyspark.sql import types as T

from statecore.catalog import Catalog
from statecore.cli import main as cli_main
from statecore.config import StatecoreConfig
from statecore.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statecore.errors import ConfigError, UnknownStateError
from statecore.ops.materialize import materialize_changes
from statecore.ops.savepoint import take_savepoint
from statecore.query.sql import open_point_views, open_views
from statecore.query.views import query_points
from statecore.runtime import (
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    OnTimerContext,
    RuntimeContext,
)
from statecore.snapshot.changelog import ChangelogConfig
from statecore.spark import keyed_process, state_views
from statecore.spark.session import (
    DELTA_CATALOG,
    LOOPBACK,
    has_delta,
    require_delta,
    s3a_conf,
    session_conf,
)
from statecore.spark.sql import run_spark_sql
from statecore.ttl import StateTtlConfig

# Spark SQL over a dozen Delta tables, several times: minutes on a loaded 2-core machine.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
JOB = "kinds"
PROFILE = pa.struct([("name", pa.string()), ("seen", pa.timestamp("us", tz="UTC"))])
TAGS = pa.map_(pa.string(), pa.int64())
MEAN = pa.struct([("sum", pa.float64()), ("n", pa.int64())])
INPUT = "user string, item string, amount double, ts long"
OUTPUT = T.StructType(
    [
        T.StructField("user", T.StringType()),
        T.StructField("item", T.StringType()),
        T.StructField("at", T.TimestampType()),
    ]
)


class Mean(AggregateFunction[float, dict[str, Any], float]):
    def create_accumulator(self) -> dict[str, Any]:
        return {"sum": 0.0, "n": 0}

    def add(self, value: float, accumulator: dict[str, Any]) -> dict[str, Any]:
        return {"sum": accumulator["sum"] + value, "n": accumulator["n"] + 1}

    def get_result(self, accumulator: dict[str, Any]) -> float:
        return float(accumulator["sum"] / max(accumulator["n"], 1))

    def merge(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {"sum": a["sum"] + b["sum"], "n": a["n"] + b["n"]}


class EveryKind(KeyedProcessFunction, CheckpointedFunction):
    """Every kind of state, a namespace, event-time timers, operator and broadcast state."""

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        store = context.operator_state_store
        self.offsets = store.get_list_state(ListStateDescriptor("offsets", int))
        self.rules = store.get_broadcast_state(MapStateDescriptor("rules", str, int))
        self.restored = context.is_restored

    def open(self, ctx: RuntimeContext) -> None:
        ttl = StateTtlConfig(ttl=timedelta(days=1))
        self.last = ctx.get_state(ValueStateDescriptor("last", str, ttl=ttl))
        self.profile = ctx.get_state(ValueStateDescriptor("profile", PROFILE))
        self.tags = ctx.get_state(ValueStateDescriptor("tags", TAGS))
        self.blob = ctx.get_state(ValueStateDescriptor("blob", bytes))
        self.items = ctx.get_list_state(ListStateDescriptor("items", str))
        self.counts = ctx.get_map_state(MapStateDescriptor("counts", str, int))
        self.total = ctx.get_reducing_state(
            ReducingStateDescriptor("total", lambda a, b: a + b, float)
        )
        self.mean = ctx.get_aggregating_state(AggregatingStateDescriptor("mean", Mean(), MEAN))
        self.windows = ctx.get_list_state(ListStateDescriptor("windows", float))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        seen = datetime.fromtimestamp(value.ts / 1000, UTC)
        self.last.update(value.item)
        self.profile.update({"name": ctx.current_key.upper(), "seen": seen})
        self.tags.update({value.item: len(value.item), "n": len(self.items.get() or [])})
        self.blob.update(value.item.encode() + b"\x00\xff")
        self.items.add(value.item)
        self.counts.put(value.item, (self.counts.get(value.item) or 0) + 1)
        self.total.add(value.amount)
        self.mean.add(value.amount)
        self.windows.set_current_namespace(f"w{value.ts // 10_000}")
        self.windows.add(value.amount)
        self.windows.set_current_namespace("")
        ctx.timer_service.register_event_time_timer(value.ts + 3_600_000)
        yield ctx.current_key, value.item, seen

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple[Any, ...]]:
        yield from ()

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        if not self.restored:
            self.offsets.add_all(range(5))
            self.rules.put("threshold", 7)


def records(day: int, users: int = 12) -> list[tuple[str, str, float, int]]:
    base = 1_800_000_000_000 + day * 86_400_000
    rows = [
        (f"u{i}", f"item{(i + day) % 3}", float(i + day), base + i * 1000) for i in range(users)
    ]
    if day == 2:
        rows = [r for r in rows if r[0] != "u3"]  # some keys change, others do not
    return rows


def run_day(spark: Any, out: Path, day: int) -> Any:
    run = keyed_process(
        spark.createDataFrame(records(day), INPUT),
        key="user",
        function=EveryKind(),
        output_schema=OUTPUT,
        job=JOB,
        checkpoint_id=day,
        parallelism=2,
        order_by=["ts"],
        output_table=str(out),
        changelog=ChangelogConfig(max_change_ratio=100.0),  # changes stay pending
    )
    return run


@pytest.fixture(scope="module")
def kinds(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StatecoreConfig]:
    """Checkpoints 1 and 2 (the latter with pending changes) and a savepoint of checkpoint 1."""
    home = tmp_path_factory.mktemp("kinds") / "statecore"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STATECORE_HOME", str(home))
        env.delenv("STATECORE_CATALOG_URL", raising=False)
        env.delenv("STATECORE_WAREHOUSE", raising=False)
        config = StatecoreConfig.resolve(env={"STATECORE_HOME": str(home)})
        out = home / "output" / JOB
        run_day(spark, out, 1)
        with Catalog.connect(config.catalog_url) as catalog:
            take_savepoint(config, catalog, JOB, name="day1")
        run_day(spark, out, 2)
        yield config


def output_path(config: StatecoreConfig) -> str:
    return f"{config.home}/output/{JOB}"


def normalized(value: Any) -> Any:
    """One Python value for what DuckDB and Spark return alike (maps as sorted pairs,
    timestamps in UTC, floats rounded)."""
    if isinstance(value, dict):
        return tuple(sorted((k, normalized(v)) for k, v in value.items()))
    if isinstance(value, list):
        if value and isinstance(value[0], tuple) and len(value[0]) == 2:  # Arrow map
            return tuple(sorted((k, normalized(v)) for k, v in value))
        return tuple(normalized(v) for v in value)
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, float):
        return round(value, 9)
    return value


def rows_of(table: pa.Table) -> list[tuple[Any, ...]]:
    names = sorted(table.column_names)
    return sorted((tuple(normalized(r[n]) for n in names) for r in table.to_pylist()), key=repr)


def compare(
    spark: Any, catalog: Catalog, only: tuple[str, ...] | None = None, **point: Any
) -> list[str]:
    """Every view of ``point`` (or the states ``only``) and the catalog's listings through both
    engines; the views."""
    duck = open_point_views(query_points(catalog, **point), catalog)
    sparked = state_views(spark, point.get("job"), point.get("checkpoint_id"),
                          savepoint=point.get("savepoint"), catalog=catalog)  # fmt: skip
    try:
        assert sorted(sparked.views) == sorted(duck.views)
        chosen = [v for v in duck.views if only is None or v.split(".", 1)[1] in only]
        for view in [*chosen, "statecore.checkpoints", "statecore.savepoints"]:
            schema, name = view.split(".", 1)
            query = f'SELECT * FROM "{schema}"."{name}"'
            expected = duck.sql(query)
            got = sparked.sql(f"SELECT * FROM `{schema}`.`{name}`")
            assert sorted(got.column_names) == sorted(expected.column_names), view
            assert rows_of(got) == rows_of(expected), view
        return list(duck.views)
    finally:
        duck.close()
        sparked.close()


def test_spark_sql_views_match_duckdb_on_every_kind(spark: Any, kinds: StatecoreConfig) -> None:
    with Catalog.connect(kinds.catalog_url) as catalog:
        latest = catalog.latest_checkpoint(JOB)
        assert latest is not None and latest.checkpoint_id == 2
        assert any(t.table_kind == "changes" for t in latest.tables)  # pending changes
        views = compare(spark, catalog, job=JOB)
        for state in ("last", "profile", "tags", "blob", "items", "counts", "total", "mean",
                      "windows", "timers", "offsets", "rules"):  # fmt: skip
            assert f"{JOB}.{state}" in views
        # an earlier checkpoint and a savepoint: the same names, at their own versions
        compare(spark, catalog, ("profile", "counts", "timers"), job=JOB, checkpoint_id=1)
        compare(spark, catalog, ("tags", "rules"), job=JOB, savepoint="day1")
        # the same query, aggregated, through both engines
        query = "SELECT count(*) AS n, sum(value) AS total FROM kinds.total"
        duck = open_views(catalog, jobs=[JOB])
        try:
            expected = duck.sql(query).to_pylist()
        finally:
            duck.close()
        got = run_spark_sql(spark, catalog, query.replace("kinds.total", "`kinds`.`total`"))
        assert got.to_pylist() == expected and expected[0]["n"] == 12


def test_delta_spark_reads_every_table_statecore_writes(spark: Any, kinds: StatecoreConfig) -> None:
    with Catalog.connect(kinds.catalog_url) as catalog:
        latest = catalog.latest_checkpoint(JOB)
        assert latest is not None
        tables = {(t.table_kind, t.state): t for t in latest.tables}
    for table in tables.values():  # every table, at the version the catalog names
        frame = spark.read.format("delta").option("versionAsOf", table.version).load(table.path)
        assert frame.count() == table.rows, table

    def types(kind: str, state: str) -> dict[str, Any]:
        t = tables[kind, state]
        frame = spark.read.format("delta").option("versionAsOf", t.version).load(t.path)
        return {f.name: f.dataType for f in frame.schema.fields}

    keyed = [s for k, s in tables if k == "keyed"]
    assert {"last", "profile", "tags", "blob", "items", "counts", "mean"} <= set(keyed)
    profile = types("keyed", "profile")["value"]
    assert isinstance(profile, T.StructType)
    assert isinstance(profile["seen"].dataType, T.TimestampType)
    assert isinstance(types("keyed", "tags")["value"], T.MapType)
    assert isinstance(types("keyed", "blob")["value"], T.BinaryType)
    assert isinstance(types("keyed", "items")["value"], T.ArrayType)
    assert set(types("keyed", "last")) - set(types("keyed", "blob"))  # the TTL column
    assert ("changes", "profile") in tables  # change files, not yet materialized
    assert isinstance(types("changes", "profile")["value"], T.StructType)
    # the output table, with its timestamps
    out = spark.read.format("delta").load(output_path(kinds))
    assert isinstance(out.schema["at"].dataType, T.TimestampType)
    assert out.count() == len(records(1)) + len(records(2))
    # materialized: plain Delta for any reader, and the views still agree
    with Catalog.connect(kinds.catalog_url) as catalog:
        done = materialize_changes(catalog, JOB)
        assert done is not None
        assert not [t for t in done.tables if t.table_kind == "changes" and t.rows]
        for t in done.tables:
            frame = spark.read.format("delta").option("versionAsOf", t.version).load(t.path)
            assert frame.count() == t.rows, t
        compare(spark, catalog, ("profile", "items", "mean"), job=JOB)


def test_delta_spark_describe_history_shows_statecore_commits(
    spark: Any, kinds: StatecoreConfig
) -> None:
    with Catalog.connect(kinds.catalog_url) as catalog:
        first = catalog.get_checkpoint(JOB, 1)
        table = next(t for t in first.tables if t.state == "profile" and t.table_kind == "keyed")
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table.path}`").collect()
    versions = {r["version"]: r for r in history}
    assert table.version in versions
    assert versions[table.version]["operation"]
    # the job's application transaction: statecore's commits carry (job, checkpoint id)
    out = output_path(kinds)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{out}`").collect()
    assert len(history) >= 2
    log = spark.read.json(f"{out}/_delta_log/*.json")
    txns = {
        (r["appId"], r["version"]) for r in log.where("txn IS NOT NULL").select("txn.*").collect()
    }
    # the application id names the job (and its operator); the version is the checkpoint id
    assert {1, 2} <= {version for app, version in txns if JOB in app}


def test_delta_spark_writer_racing_the_output_table_keeps_each_checkpoint_once(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    out = tmp_path / "race"
    run_day(spark, out, 1)
    stop = threading.Event()
    appended: list[int] = []

    def other_writer() -> None:
        while not stop.is_set():
            n = len(appended)
            spark.createDataFrame(
                [(f"other{n}", "x", datetime(2026, 1, 1, tzinfo=UTC))], OUTPUT
            ).write.format("delta").mode("append").save(str(out))
            appended.append(n)

    writer = threading.Thread(target=other_writer)
    writer.start()
    try:
        run_day(spark, out, 2)
        replay = run_day(spark, out, 2)  # a replay commits nothing
        assert replay.replayed
    finally:
        stop.set()
        writer.join()
    frame = spark.read.format("delta").load(str(out))
    rows = frame.selectExpr("user", "_metadata.file_name AS file").collect()
    per_checkpoint = {1: 0, 2: 0}
    others = set()
    for row in rows:
        if row["user"].startswith("other"):
            others.add(row["user"])
        else:
            per_checkpoint[int(row["file"].split("-cp")[1][:12])] += 1
    assert per_checkpoint == {1: len(records(1)), 2: len(records(2))}
    assert others == {f"other{n}" for n in appended}  # nor did statecore drop theirs


def test_spark_sql_is_read_only_and_names_its_views(spark: Any, kinds: StatecoreConfig) -> None:
    with Catalog.connect(kinds.catalog_url) as catalog:
        for statement in (
            "DELETE FROM `kinds`.`total`",
            "INSERT INTO `kinds`.`total` SELECT * FROM `kinds`.`total`",
            "SET spark.sql.ansi.enabled=false",
            "CREATE TABLE t AS SELECT 1",
            "DROP VIEW `kinds`.`total`",
        ):
            with pytest.raises(ConfigError, match="read-only"):
                run_spark_sql(spark, catalog, statement, job=JOB)
        with pytest.raises(UnknownStateError, match=r"kinds\.total"):
            run_spark_sql(spark, catalog, "SELECT * FROM kinds.nope", job=JOB)
    assert "kinds" not in {d.name for d in spark.catalog.listDatabases()}  # dropped after


def test_spark_sql_cli_engine(
    spark: Any, kinds: StatecoreConfig, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("STATECORE_HOME", kinds.home)
    query = "SELECT key, value FROM kinds.total ORDER BY key LIMIT 2"
    assert cli_main(["sql", query.replace("kinds.total", "`kinds`.`total`"), "--engine", "spark",
                     "--format", "json"]) in (0, None)  # fmt: skip
    spark_rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    assert cli_main(["sql", query, "--format", "json"]) in (0, None)
    duck_rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    assert spark_rows == duck_rows and len(spark_rows) == 2


def test_spark_sql_without_delta_says_how_to_get_the_jars(tmp_path: Path) -> None:
    class NoJvm:
        @property
        def sparkContext(self) -> Any:
            raise RuntimeError("no JVM")

    assert not has_delta(NoJvm())
    with pytest.raises(ConfigError, match="make jars"):
        require_delta(NoJvm())
    # no JAR folder: a plain session (no Delta settings), still on loopback
    conf = session_conf(
        master="local[2]", env={"STATECORE_JARS": str(tmp_path)}, warehouse=str(tmp_path)
    )
    assert "spark.sql.extensions" not in conf and "spark.jars" not in conf
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == LOOPBACK


def test_spark_sql_session_builder_settings(spark: Any, tmp_path: Path) -> None:
    # the shared test session is the builder's: Delta, loopback, UTC
    assert has_delta(spark)
    assert spark.conf.get("spark.sql.catalog.spark_catalog") == DELTA_CATALOG
    assert spark.conf.get("spark.driver.host") == LOOPBACK
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    conf = session_conf(master="k8s://https://k8s:443", warehouse=str(tmp_path), env={})
    assert "spark.driver.host" not in conf  # a cluster's driver is not on loopback
    env = {
        "AWS_ACCESS_KEY_ID": "AKID",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "STATECORE_S3_ENDPOINT": "http://127.0.0.1:9000",
    }
    s3 = s3a_conf("s3://bucket/warehouse", env)
    assert s3["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert s3["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert s3["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert s3["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert s3["spark.hadoop.fs.AbstractFileSystem.s3.impl"] == "org.apache.hadoop.fs.s3a.S3A"
    # credentials stay in the environment (S3A's default chain reads them): none in Spark's conf
    assert not any(v in ("AKID", "secret") for v in s3.values())
    assert not any(k.endswith((".access.key", ".secret.key", ".session.token")) for k in s3)
    assert s3a_conf("s3://bucket/w", {})["spark.hadoop.fs.s3a.path.style.access"] == "false"
    with pytest.raises(ConfigError, match="STATECORE_S3_PATH_STYLE"):
        s3a_conf("s3://b/w", {"STATECORE_S3_PATH_STYLE": "maybe"})


def test_delta_spark_jars_are_resolved_once_from_the_pom() -> None:
    folder = Path(sys.prefix) / "jars"
    if not (folder / ".statecore-jars.json").exists():
        pytest.skip("the Delta JARs are not in .venv/jars: run `make jars` (make test does)")
    stamp = json.loads((folder / ".statecore-jars.json").read_text())
    assert any(j.startswith("delta-spark_4.2_2.13-") for j in stamp["jars"])
    assert any(j.startswith("spark-sql-kafka-0-10_2.13-") for j in stamp["jars"])
    # S3A: hadoop-aws of pyspark's Hadoop and the AWS SDK's S3 client, not its bundle
    assert "hadoop-aws-3.5.0.jar" in stamp["jars"]
    assert any(j.startswith("s3-2.") for j in stamp["jars"])
    assert not any(j.startswith("bundle-") for j in stamp["jars"])

    # nothing pyspark ships twice (hadoop-client-*, httpclient, netty, slf4j stay Spark's)
    def artifact(jar: str) -> str:  # delta-storage-4.4.0.jar -> delta-storage
        return re.sub(r"-\d[\w.+-]*\.jar$", "", jar)

    shipped = {artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    assert not shipped & {artifact(j) for j in stamp["jars"]}
    # a second run with the same pom needs no Maven (none on its PATH) and downloads nothing
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "resolve_spark_jars.py"), "--dest", str(folder)],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(Path(sys.executable).parent)},
        check=True,
    )
    assert "up to date" in out.stdout
