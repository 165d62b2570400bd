"""The Spark runtime with its warehouse and output table on S3 (a real S3 API server on
loopback): the fault suite's job, checkpoint by checkpoint and killed at the output commit and
before completion (its harness, with an S3 warehouse); a stream with changelog checkpoints; and
the credentials nowhere but in the environment.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.errors import StateError
from statecore.ops.overview import checkpoints_overview, job_overview
from statecore.ops.savepoint import take_savepoint
from statecore.query import run_sql
from statecore.query.sql import connect
from statecore.snapshot.changelog import ChangelogConfig
from tests.faults.harness import LEASE_TIMEOUT, Case, run_case
from tests.faults.scenario import (
    CHECKPOINTS,
    differences,
    expected_outcome,
    output_table,
    read_outcome,
    run_checkpoint,
)
from tests.object_store.conftest import S3Server
from tests.spark.stream_job import start
from tests.spark.test_stream import write_file

pytestmark = pytest.mark.spark


@pytest.fixture
def s3_faults(s3_home: StatecoreConfig, monkeypatch: pytest.MonkeyPatch) -> StatecoreConfig:
    """The S3 home, with the fault suite's lease timeout (a recovery waits out a dead run)."""
    monkeypatch.setenv("STATECORE_LEASE_TIMEOUT", LEASE_TIMEOUT)
    return StatecoreConfig.resolve(
        home=s3_home.home,
        warehouse=s3_home.warehouse,
        env={"STATECORE_LEASE_TIMEOUT": LEASE_TIMEOUT},
    )


def test_object_store_runs_checkpoint_by_checkpoint_and_keeps_credentials_out(
    s3_spark: Any,
    s3_faults: StatecoreConfig,
    s3_server: S3Server,
    capfd: pytest.CaptureFixture[str],
) -> None:
    config = s3_faults
    for checkpoint_id in CHECKPOINTS:
        run_checkpoint(s3_spark, config, api="record", backend="heap", checkpoint_id=checkpoint_id)
    assert output_table(config).startswith("s3://")
    assert differences(read_outcome(config), expected_outcome()) == []
    with Catalog.connect(config.catalog_url) as catalog:
        # A failure on S3 names the place, not the credentials.
        with pytest.raises(StateError) as failed:
            take_savepoint(config, catalog, "faults", target="s3://no-such-bucket/savepoints")
        page = json.dumps(
            [job_overview(catalog, "faults"), checkpoints_overview(catalog, "faults")], default=str
        )
        try:
            run_sql(catalog, "SELECT * FROM faults.missing")
        except StateError as exc:
            page += str(exc)
    logs = capfd.readouterr()
    catalog_rows = "\n".join(map(str, _rows(Path(config.catalog_url.removeprefix("sqlite:///")))))
    assert "s3://" in catalog_rows  # the catalog does name the S3 tables
    for where, text in {
        "error": str(failed.value),
        "logs": logs.out + logs.err,
        "catalog": catalog_rows
        + Path(config.catalog_url.removeprefix("sqlite:///")).read_text(errors="replace"),
        "statecore page": page,
    }.items():
        assert s3_server.secret not in text, where
        assert s3_server.env["AWS_ACCESS_KEY_ID"] not in text, where


def _rows(db: Path) -> list[tuple[Any, ...]]:
    """Every row of every table of the SQLite catalog ``db``."""
    con = sqlite3.connect(db)
    try:
        tables = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return [row for (table,) in tables for row in con.execute(f'SELECT * FROM "{table}"')]
    finally:
        con.close()


@pytest.mark.parametrize(
    "case",
    [Case("output:commit:before"), Case("output:commit:after"), Case("catalog:complete:before")],
    ids=str,
)
def test_object_store_kill_point_loses_and_doubles_nothing(
    case: Case, s3_spark: Any, s3_faults: StatecoreConfig, tmp_path: Path
) -> None:
    killed = run_case(s3_spark, s3_faults, case, tmp_path / "fired")
    assert killed.fired, f"the point {case.point} was never reached:\n{killed.log[-3000:]}"
    assert killed.returncode == -signal.SIGKILL, killed.log[-3000:]
    assert differences(read_outcome(s3_faults), expected_outcome()) == []


def test_object_store_stream_with_changelog_checkpoints(
    s3_spark: Any, s3_home: StatecoreConfig, tmp_path: Path
) -> None:
    """Micro-batches append change files on S3; the third change of a key group materializes
    it; statecore's readers and the output table (on S3) agree."""
    spec = {
        "job": "logged",
        "input": str(tmp_path / "in"),
        "checkpoint_location": str(tmp_path / "offsets"),  # Spark's own offsets stay local
        "output_table": f"{s3_home.warehouse}-out",
    }
    inp = Path(spec["input"])
    users = [f"u{i}" for i in range(6)]
    write_file(inp, "f0", [(u, 1000, 1) for u in users])
    every_third = ChangelogConfig(materialize_every=3, max_change_ratio=100.0)
    query = start(s3_spark, spec, changelog=every_third)
    try:
        query.processAllAvailable()
        for n in (1, 2, 3):
            write_file(inp, f"f{n}", [("u1", 1000 + n, 1)])
            query.processAllAvailable()
    finally:
        query.stop()
    with Catalog.connect(s3_home.catalog_url) as catalog:
        latest = catalog.latest_checkpoint("logged")
        totals = run_sql(catalog, "SELECT key, value FROM logged.total ORDER BY key")
    assert latest is not None and latest.checkpoint_id == 3
    assert all(t.path.startswith(f"{s3_home.warehouse}/logged/") for t in latest.tables)
    assert {r["key"]: r["value"] for r in totals.to_pylist()} == {
        **dict.fromkeys(users, 1),
        "u1": 4,
    }
    con = connect()
    try:
        out = con.execute(f"SELECT count(*) FROM delta_scan('{spec['output_table']}')").fetchone()
    finally:
        con.close()
    assert out is not None and out[0] > 0
