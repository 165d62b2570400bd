"""Repair: erase a key everywhere, or UPDATE/DELETE with SQL, always into a new savepoint."""

from __future__ import annotations

import pytest

from statecore.catalog import Catalog
from statecore.checkpoint.points import load_savepoint
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError, StateRepairError
from statecore.ops.repair import apply_sql, delete_key
from statecore.query import run_sql
from statecore.query.diff import checksums, diff_points
from tests.ops.conftest import JOB, latest
from tests.ops.statebuilder import catalog_snapshot, files_under


def test_delete_a_key_from_every_state_and_timer(job: StatecoreConfig) -> None:
    source = latest(job)
    files = files_under(f"{job.warehouse}/{JOB}")
    with Catalog.connect(job.catalog_url) as catalog:
        result = delete_key(job, catalog, JOB, "user-3", name="gdpr-user-3")
        assert [s.reason for s in catalog.list_savepoints(JOB)] == ["state-delete"]
    assert {(c.table_kind, c.state) for c in result.changes} == {
        ("keyed", "total"),
        ("keyed", "seen"),
        ("keyed", "plain"),
        ("timers", "timers"),
    }
    assert all(c.rows_after == c.rows_before - 1 and len(c.partitions) == 1 for c in result.changes)
    assert result.savepoint is not None
    repaired = load_savepoint(result.savepoint)
    diffs = {d.state: d for d in diff_points(source, repaired)}
    assert all(
        (d.removed, d.added, d.changed) == ((1, 0, 0) if d.state != "offsets" else (0, 0, 0))
        for d in diffs.values()
    )
    assert diffs["total"].examples == ("removed user-3",)
    assert latest(job) == source  # the checkpoint is untouched
    assert files_under(f"{job.warehouse}/{JOB}") == files


def test_deleting_a_key_nobody_has_writes_nothing(job: StatecoreConfig) -> None:
    before = catalog_snapshot(job)
    with Catalog.connect(job.catalog_url) as catalog:
        result = delete_key(job, catalog, JOB, "nobody")
    assert result.savepoint is None and result.changes == ()
    assert catalog_snapshot(job) == before


def test_apply_update_and_delete(job: StatecoreConfig) -> None:
    source = latest(job)
    with Catalog.connect(job.catalog_url) as catalog:
        result = apply_sql(
            job,
            catalog,
            JOB,
            """
            UPDATE clicks.total SET value = value * 2 WHERE key IN ('user-1', 'user-2');
            DELETE FROM clicks.seen WHERE key IN (SELECT key FROM clicks.plain WHERE value > 38)
        """,
        )
        assert result.savepoint is not None
        query = "SELECT key, value FROM clicks.total WHERE key IN ('user-1', 'user-2') ORDER BY 1"
        assert run_sql(catalog, query, savepoint=result.savepoint).to_pylist() == [
            {"key": "user-1", "value": 2.0},
            {"key": "user-2", "value": 4.0},
        ]
    repaired = load_savepoint(result.savepoint)
    diffs = {d.state: (d.added, d.removed, d.changed) for d in diff_points(source, repaired)}
    assert diffs == {
        "total": (0, 0, 2),
        "seen": (0, 2, 0),
        "plain": (0, 0, 0),
        "timers": (0, 0, 0),
        "offsets": (0, 0, 0),
    }
    same = {c.state: c.checksum for c in checksums(source)}
    assert {
        c.state: c.checksum
        for c in checksums(repaired)
        if c.state in ("plain", "timers", "offsets")
    } == {k: v for k, v in same.items() if k in ("plain", "timers", "offsets")}


@pytest.mark.parametrize(
    "sql, message",
    [
        (
            "UPDATE clicks.total SET key = 'someone-else' WHERE key = 'user-1'",
            "change the key or key_group column of 1 rows of clicks.total",
        ),
        ("UPDATE clicks.timers SET key_group = 0", "change the key or key_group column"),
        ("INSERT INTO clicks.total VALUES ('x', '', 1.0, 1, 5)", "only UPDATE and DELETE"),
        (
            "SELECT * FROM clicks.total",
            "only UPDATE and DELETE statements repair state, not SELECT",
        ),
        ("UPDATE other.total SET value = 0", "must write one of the views of job 'clicks'"),
        ("UPDATE clicks.total SET value = 'not a number'", "failed"),
        ("UPDATE clicks.total SET __statecore_row = 0", "reserved"),
    ],
)
def test_bad_statements_change_nothing(job: StatecoreConfig, sql: str, message: str) -> None:
    before, files = catalog_snapshot(job), files_under(job.warehouse)
    with Catalog.connect(job.catalog_url) as catalog:
        with pytest.raises(StateRepairError, match=message):
            apply_sql(job, catalog, JOB, sql)
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files


def test_sql_is_read_only(job: StatecoreConfig) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        for statement in (
            "DELETE FROM clicks.total",
            "CREATE TABLE x AS SELECT 1",
            "COPY (SELECT 1) TO 'x.csv'",
        ):
            with pytest.raises(ConfigError, match="read-only"):
                run_sql(catalog, statement)
        assert run_sql(catalog, "SELECT count(*) AS n FROM clicks.timers").to_pylist() == [
            {"n": 10}
        ]
        assert run_sql(catalog, "SELECT count(*) AS n FROM clicks.offsets").to_pylist() == [
            {"n": 3}
        ]
