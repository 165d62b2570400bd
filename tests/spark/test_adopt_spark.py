"""Adopt state edited with Spark SQL (delta-spark ``DELETE``, ``UPDATE``, ``MERGE``): docs/sql.md's
example as its reader runs it, and a ``MERGE`` that misplaces a key refused, naming the row."""

from __future__ import annotations

import contextlib
import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from jobs import clickstream
from statecore.catalog import Catalog
from statecore.cli import main
from statecore.config import StatecoreConfig
from statecore.errors import StateAdoptionError
from statecore.keygroups import assign_to_key_group
from statecore.ops.adopt import adopt_savepoint
from statecore.ops.savepoint import take_savepoint
from statecore.query import lookup
from tests.inprocess import run_checkpoint
from tests.ops.conftest import JOB, USERS, tables
from tests.ops.statebuilder import write_checkpoint
from tests.test_readme_examples import REPO, Event, blocks, build_demo_home

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1800)]

PAGE = REPO / "docs" / "sql.md"


def section_blocks() -> list[Any]:
    """docs/sql.md's blocks of the adopt example: the export, the Spark SQL edit, the adoption."""
    found = [
        b
        for b in blocks(PAGE)
        if b.lang != "text" and ("before-fix" in b.code or "gdpr-fix" in b.code)
    ]
    assert [b.lang for b in found] == ["bash", "python", "bash"], found
    return found


def run_commands(home: Path, code: str) -> None:
    for line in code.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        assert words[0] == ".venv/bin/statecore"
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            assert main(["--home", str(home), *words[1:]]) == 0, out.getvalue()


def test_adopt_docs_example_spark_sql(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GDPR delete and the corrected balance of docs/sql.md, in Spark SQL, adopted and
    restored: the next run of the demo's job sees both."""
    home = build_demo_home(tmp_path)
    monkeypatch.setenv("STATECORE_HOME", str(home))
    config = StatecoreConfig.resolve(home=str(home), env={})
    assert lookup(clickstream.JOB, "total_amount", "user-42", config=config).found
    export, edit, adopt = section_blocks()
    run_commands(home, export.code)
    exec(compile(edit.code, f"{PAGE}:{edit.line}", "exec"), {})  # the page's Spark SQL
    run_commands(home, adopt.code)
    for state in ("total_amount", "last_events", "event_counts", "max_amount"):
        assert not lookup(clickstream.JOB, state, "user-42", config=config).found, state
    assert lookup(clickstream.JOB, "total_amount", "user-7", config=config).value == 100.0
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.get_savepoint(clickstream.JOB, "gdpr-fixed").reason == "adopt"
        latest = catalog.latest_checkpoint(clickstream.JOB)
    assert latest is not None
    event = Event(
        user_id="user-7", event_type="click", amount=1.0, ts=datetime(2026, 1, 4, tzinfo=UTC)
    )
    out, _ = run_checkpoint(
        config,
        clickstream.UserActivity(),
        [("user-7", event), ("user-42", event._replace(user_id="user-42"))],
        job=clickstream.JOB,
        checkpoint_id=latest.checkpoint_id + 1,
        parallelism=2,
    )
    totals = {row[0]: row[4] for row in out}
    assert totals == {"user-7": 101.0, "user-42": 1.0}  # user-42 starts anew


def test_adopt_spark_sql_merge_refused_then_adopted(spark: Any, statecore_home: Any) -> None:
    """A ``MERGE`` that inserts a key into the wrong key group is refused, naming the row;
    one that updates values is adopted."""
    config: StatecoreConfig = statecore_home
    write_checkpoint(config, JOB, 1, tables(USERS, 10_000))
    with Catalog.connect(config.catalog_url) as catalog:
        folder = take_savepoint(config, catalog, JOB, name="base").savepoint
    plain = f"{folder}/main/keyed/plain"
    wrong = (assign_to_key_group("user-new", 128) + 1) % 128
    spark.sql(
        f"MERGE INTO delta.`{plain}` t USING (SELECT 'user-new' AS key, '' AS namespace, "
        f"1.0D AS value, {wrong} AS key_group) s ON t.key = s.key AND t.namespace = s.namespace "
        "WHEN NOT MATCHED THEN INSERT *"
    )
    with Catalog.connect(config.catalog_url) as catalog:
        with pytest.raises(StateAdoptionError) as refused:
            adopt_savepoint(config, catalog, "base", job=JOB, name="fixed")
        assert [(p.key, p.key_group) for p in refused.value.problems] == [("user-new", wrong)]
        assert [s.name for s in catalog.list_savepoints(JOB)] == ["base"]
        spark.sql(f"DELETE FROM delta.`{plain}` WHERE key = 'user-new'")
        spark.sql(
            f"MERGE INTO delta.`{plain}` t USING (SELECT 'user-1' AS key, 11.0D AS value) s "
            "ON t.key = s.key WHEN MATCHED THEN UPDATE SET t.value = s.value"
        )
        adopted = adopt_savepoint(config, catalog, "base", job=JOB, name="fixed")
    table = next(t for t in adopted.tables if t.state == "plain")
    rows = DeltaTable(table.path, version=table.version).to_pyarrow_table().to_pylist()
    assert {r["key"]: r["value"] for r in rows} == dict(USERS, **{"user-1": 11.0})
