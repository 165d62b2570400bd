"""Adopt: state tables edited by another Delta writer (deltalake here; Spark SQL in
test_adopt_spark.py) validated and registered as a savepoint, or refused with each bad row named."""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import sqlalchemy as sa
from deltalake import DeltaTable, write_deltalake

from statecore.backends import HeapKeyedStateBackend, RocksDBKeyedStateBackend
from statecore.backends.base import KeyedStateBackend
from statecore.catalog import Catalog
from statecore.checkpoint.points import load_savepoint
from statecore.cli import main
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError, StateAdoptionError
from statecore.keygroups import assign_to_key_group
from statecore.ops.adopt import adopt_savepoint
from statecore.ops.savepoint import pin_savepoint, restore_savepoint, take_savepoint
from statecore.ttl import ManualTimeProvider
from statecore.types import PICKLED_FIELD
from tests.inprocess import run_checkpoint
from tests.ops.conftest import JOB, USERS, tables
from tests.ops.statebuilder import Table, write_checkpoint
from tests.postgres import POSTGRES_ENV, run_admin
from tests.runtime.test_changelog import Mixed

POSTGRES_SCHEMA = f"statecore_adopt_tests_{os.getpid()}"
_no_postgres = pytest.mark.skipif(
    not os.environ.get(POSTGRES_ENV), reason=f"set {POSTGRES_ENV} to run against Postgres"
)


BOTH_CATALOGS = pytest.mark.parametrize(
    "home", ["sqlite", pytest.param("postgres", marks=_no_postgres)], indirect=True
)
"""Tests that register (or refuse to) run on both catalogs; the others on SQLite."""


@pytest.fixture
def home(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[StatecoreConfig]:
    """A fresh home whose catalog is SQLite, or a fresh schema of the test PostgreSQL."""
    env = {"STATECORE_HOME": str(tmp_path / "statecore")}
    base = None
    if getattr(request, "param", "sqlite") == "postgres":
        base = sa.make_url(os.environ[POSTGRES_ENV])
        run_admin(
            base,
            f"DROP SCHEMA IF EXISTS {POSTGRES_SCHEMA} CASCADE",
            f"CREATE SCHEMA {POSTGRES_SCHEMA}",
        )
        url = base.update_query_dict({"options": f"-csearch_path={POSTGRES_SCHEMA}"})
        env["STATECORE_CATALOG_URL"] = url.render_as_string(hide_password=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("STATECORE_WAREHOUSE", raising=False)
    yield StatecoreConfig.resolve(env=env)
    if base is not None:
        run_admin(base, f"DROP SCHEMA IF EXISTS {POSTGRES_SCHEMA} CASCADE")


def export(config: StatecoreConfig, job: str = JOB, name: str = "base") -> str:
    """An export of ``job``'s latest checkpoint: the folder a user edits."""
    with Catalog.connect(config.catalog_url) as catalog:
        folder = take_savepoint(config, catalog, job, name=name).savepoint
    assert folder is not None
    return folder


@pytest.fixture
def clicks(home: StatecoreConfig) -> tuple[StatecoreConfig, str]:
    """Job ``clicks`` (value and list states with TTL, a plain value state, timers, an
    operator list state) and an export of its checkpoint, ``base``."""
    write_checkpoint(home, JOB, 1, tables(USERS, 10_000))
    return home, export(home)


def adopt(config: StatecoreConfig, location: str = "base", **kwargs: Any) -> Any:
    with Catalog.connect(config.catalog_url) as catalog:
        return adopt_savepoint(config, catalog, location, job=JOB, **kwargs)


def refused(config: StatecoreConfig, location: str = "base", **kwargs: Any) -> StateAdoptionError:
    """The refusal of adopting ``location`` as ``fixed``; nothing was registered or written."""
    with Catalog.connect(config.catalog_url) as catalog:
        before = [s.name for s in catalog.list_savepoints(JOB)]
    with pytest.raises(StateAdoptionError) as raised:
        adopt(config, location, name="fixed", **kwargs)
    with Catalog.connect(config.catalog_url) as catalog:
        assert [s.name for s in catalog.list_savepoints(JOB)] == before
    assert not Path(f"{config.warehouse}/_savepoints/{JOB}/fixed").exists()
    return raised.value


def rows_of(uri: str, version: int | None = None) -> list[dict[str, Any]]:
    rows = DeltaTable(uri, version=version).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: tuple(str(v) for v in r.values()))


def table_rows(uri: str) -> pa.Table:
    return DeltaTable(uri).to_pyarrow_table()


@BOTH_CATALOGS
def test_adopt_deleted_key_and_updated_value_registers_an_immutable_copy(
    clicks: tuple[StatecoreConfig, str],
) -> None:
    config, folder = clicks
    plain = f"{folder}/main/keyed/plain"
    DeltaTable(plain).delete("key = 'user-3'")
    DeltaTable(plain).update(updates={"value": "99.5"}, predicate="key = 'user-4'")
    adopted = adopt(config, name="fixed")
    assert adopted.savepoint == f"{config.warehouse}/_savepoints/{JOB}/fixed"
    with Catalog.connect(config.catalog_url) as catalog:
        record = catalog.get_savepoint(JOB, "fixed")
    assert (record.reason, record.path, record.pin) == ("adopt", adopted.savepoint, None)
    assert record.source_checkpoint == 1
    point = load_savepoint(adopted.savepoint)
    table = next(t for t in point.tables if t.state == "plain")
    expected = {k: v for k, v in USERS.items() if k != "user-3"} | {"user-4": 99.5}
    assert {r["key"]: r["value"] for r in rows_of(table.path, table.version)} == expected
    assert table.rows == len(expected)
    # later edits (and VACUUM) of the edited folder change nothing the savepoint restores
    DeltaTable(plain).delete("key = 'user-5'")
    DeltaTable(plain).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    again = next(t for t in load_savepoint(adopted.savepoint).tables if t.state == "plain")
    assert {r["key"]: r["value"] for r in rows_of(again.path, again.version)} == expected


@BOTH_CATALOGS
def test_adopt_refuses_a_row_in_the_wrong_key_group_naming_it(
    clicks: tuple[StatecoreConfig, str],
) -> None:
    config, folder = clicks
    total = f"{folder}/main/keyed/total"
    row = table_rows(total).filter(pc.equal(pc.field("key"), "user-7")).to_pylist()[0]
    right = assign_to_key_group("user-7", 128)
    wrong = (right + 1) % 128
    intruder = dict(row, key="user-7", key_group=wrong)
    write_deltalake(
        total, pa.Table.from_pylist([intruder], schema=table_rows(total).schema), mode="append"
    )
    error = refused(config)
    assert error.total == 1
    (problem,) = error.problems
    assert (problem.state, problem.key, problem.key_group, problem.expected_key_group) == (
        "total",
        "user-7",
        wrong,
        right,
    )
    assert f"key 'user-7' key group {wrong} (expected key group {right})" in str(error)


def test_adopt_refuses_duplicate_key_and_namespace(clicks: tuple[StatecoreConfig, str]) -> None:
    config, folder = clicks
    plain = f"{folder}/main/keyed/plain"
    row = table_rows(plain).filter(pc.equal(pc.field("key"), "user-2")).to_pylist()[0]
    write_deltalake(
        plain,
        pa.Table.from_pylist([dict(row, value=7.0)], schema=table_rows(plain).schema),
        mode="append",
    )
    error = refused(config)
    assert error.total == 1
    assert error.problems[0].key == "user-2" and error.problems[0].state == "plain"
    assert "more than one row for key, namespace = ('user-2', '')" in error.problems[0].reason
    # the same key in another namespace is another row of the state: adopted
    DeltaTable(plain).delete("key = 'user-2' AND value = 7.0")
    write_deltalake(
        plain,
        pa.Table.from_pylist([dict(row, namespace="window-1")], schema=table_rows(plain).schema),
        mode="append",
    )
    assert adopt(config, name="fixed").name == "fixed"


def test_adopt_refuses_a_bad_schema(clicks: tuple[StatecoreConfig, str]) -> None:
    config, folder = clicks
    plain = f"{folder}/main/keyed/plain"
    extra = table_rows(plain).append_column("note", pa.array(["x"] * len(USERS)))
    write_deltalake(
        plain, extra, mode="overwrite", schema_mode="overwrite", partition_by=["key_group"]
    )
    error = refused(config)
    assert [p.reason for p in error.problems] == [
        "column 'note' (string) is not a column of this state"
    ]
    retyped = table_rows(plain).drop_columns(["note"])
    retyped = retyped.set_column(2, "value", pc.cast(retyped.column("value"), pa.int64()))
    write_deltalake(
        plain, retyped, mode="overwrite", schema_mode="overwrite", partition_by=["key_group"]
    )
    error = refused(config)
    assert [p.reason for p in error.problems] == [
        "column 'value' is int64, the state's serializer writes double"
    ]


def test_adopt_refuses_an_undecodable_pickled_value(home: StatecoreConfig) -> None:
    schema = pa.schema(
        [
            pa.field("key", pa.string(), nullable=False),
            pa.field("namespace", pa.string(), nullable=False),
            pa.field("value", pa.binary(), metadata=PICKLED_FIELD),
        ]
    )
    rows = pa.table(
        {"key": ["a", "b"], "namespace": ["", ""], "value": [pickle.dumps({"x": 1}), None]},
        schema=schema,
    )
    write_checkpoint(home, JOB, 1, {"objects": Table(rows)})
    folder = export(home)
    objects = f"{folder}/main/keyed/objects"
    DeltaTable(objects).update(updates={"value": "X'8004'"}, predicate="key = 'b'")
    error = refused(home)
    assert [(p.key, p.state) for p in error.problems] == [("b", "objects")]
    assert "not a value pickle wrote" in error.problems[0].reason
    good = pickle.dumps([1, 2]).hex()
    DeltaTable(objects).update(updates={"value": f"X'{good}'"}, predicate="key = 'b'")
    assert adopt(home, name="fixed").name == "fixed"  # checked without unpickling


def test_adopt_checks_ttl_columns(clicks: tuple[StatecoreConfig, str]) -> None:
    config, folder = clicks
    seen = f"{folder}/main/keyed/seen"
    total = f"{folder}/main/keyed/total"
    # the list state: one timestamp too many for its values
    DeltaTable(seen).update(
        updates={"ttl_timestamp": "make_array(1, 2, 3)"}, predicate="key = 'user-1'"
    )
    DeltaTable(total).update(updates={"ttl_timestamp": "-5"}, predicate="key = 'user-2'")
    error = refused(config)
    reasons = {(p.state, p.key): p.reason for p in error.problems}
    assert reasons == {
        ("seen", "user-1"): "3 ttl_timestamp entries for 2 values",
        ("total", "user-2"): "ttl_timestamp -5 is negative",
    }
    DeltaTable(seen).update(
        updates={"ttl_timestamp": "make_array(1, 2)"}, predicate="key = 'user-1'"
    )
    DeltaTable(total).update(updates={"ttl_timestamp": "30000"}, predicate="key = 'user-2'")
    assert adopt(config, name="fixed").name == "fixed"


def test_adopt_operator_state_edits(clicks: tuple[StatecoreConfig, str]) -> None:
    config, folder = clicks
    offsets = f"{folder}/main/operator/offsets"
    schema = table_rows(offsets).schema
    write_deltalake(
        offsets,
        pa.Table.from_pylist(
            [
                {"mode": "split", "value": "d", "subtask": 5},  # parallelism is 2
                {"mode": "union", "value": "e", "subtask": 0},  # stored as "split"
            ],
            schema=schema,
        ),
        mode="append",
    )
    error = refused(config)
    reasons = sorted((p.key, p.key_group, p.reason) for p in error.problems)
    assert reasons == [
        ("d", 5, "subtask 5 is outside the savepoint's parallelism 2 (subtasks 0..1)"),
        ("e", 0, "mode 'union'; state 'offsets' stores mode 'split'"),
    ]
    DeltaTable(offsets).delete("value IN ('d', 'e')")
    write_deltalake(
        offsets,
        pa.Table.from_pylist([{"mode": "split", "value": "d", "subtask": 1}], schema=schema),
        mode="append",
    )
    adopted = adopt(config, name="fixed")
    table = next(t for t in adopted.tables if t.state == "offsets")
    assert sorted((r["subtask"], r["value"]) for r in rows_of(table.path, table.version)) == [
        (0, "a"),
        (1, "b"),
        (1, "c"),
        (1, "d"),
    ]


def test_adopt_lists_at_most_max_problems_and_counts_them_all(
    clicks: tuple[StatecoreConfig, str],
) -> None:
    config, folder = clicks
    plain = f"{folder}/main/keyed/plain"
    rows = [
        {
            "key": f"new-{i}",
            "namespace": "",
            "value": 1.0,
            "key_group": (assign_to_key_group(f"new-{i}", 128) + 1) % 128,
        }
        for i in range(30)
    ]
    write_deltalake(
        plain, pa.Table.from_pylist(rows, schema=table_rows(plain).schema), mode="append"
    )
    error = refused(config, max_problems=5)
    assert (len(error.problems), error.total) == (5, 30)
    assert "30 problem(s)" in str(error) and "... and 25 more" in str(error)


def test_adopt_a_copy_at_another_path(clicks: tuple[StatecoreConfig, str], tmp_path: Path) -> None:
    config, folder = clicks
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("_savepoint.json"))
    DeltaTable(f"{copy}/main/keyed/plain").delete("key = 'user-9'")
    with pytest.raises(Exception, match="is not a savepoint: it has no _savepoint.json"):
        adopt(config, str(copy), name="fixed")
    adopted = adopt(config, str(copy), name="fixed", source="base")
    table = next(t for t in adopted.tables if t.state == "plain")
    assert "user-9" not in {r["key"] for r in rows_of(table.path, table.version)}
    assert table.path.startswith(f"{config.warehouse}/_savepoints/{JOB}/fixed/")
    original = next(t for t in load_savepoint(folder).tables if t.state == "plain")
    assert "user-9" in {r["key"] for r in rows_of(original.path, original.version)}


def test_adopt_refuses_a_pin_and_a_missing_table(clicks: tuple[StatecoreConfig, str]) -> None:
    config, folder = clicks
    with Catalog.connect(config.catalog_url) as catalog:
        pin_savepoint(config, catalog, JOB, name="pinned")
    with pytest.raises(ConfigError, match="is a pin: its tables are the job's own tables"):
        adopt(config, "pinned", name="fixed")
    shutil.rmtree(f"{folder}/main/keyed/seen")
    error = refused(config)
    assert [(p.state, p.reason) for p in error.problems] == [
        ("seen", f"table {folder}/main/keyed/seen is missing")
    ]


@BOTH_CATALOGS
def test_adopt_cli_adopts_and_refuses_naming_rows(
    clicks: tuple[StatecoreConfig, str], capsys: pytest.CaptureFixture[str]
) -> None:
    config, folder = clicks
    plain = f"{folder}/main/keyed/plain"
    DeltaTable(plain).delete("key = 'user-1'")
    write_deltalake(
        plain,
        pa.Table.from_pylist(
            [
                {
                    "key": "user-1",
                    "namespace": "",
                    "value": 1.0,
                    "key_group": (assign_to_key_group("user-1", 128) + 3) % 128,
                }
            ],
            schema=table_rows(plain).schema,
        ),
        mode="append",
    )
    assert main(["savepoint", "adopt", "base", "--job", JOB, "--name", "fixed"]) == 2
    err = capsys.readouterr().err
    assert "main/plain key 'user-1' key group" in err and "1 problem(s)" in err
    DeltaTable(plain).delete("key = 'user-1'")
    assert main(["savepoint", "adopt", folder, "--name", "fixed", "--format", "json"]) == 0
    assert '"fixed"' in capsys.readouterr().out
    with Catalog.connect(config.catalog_url) as catalog:
        assert [s.reason for s in catalog.list_savepoints(JOB)] == ["manual", "adopt"]


@pytest.mark.parametrize("backend", [HeapKeyedStateBackend, RocksDBKeyedStateBackend])
def test_adopt_restore_sees_the_edit(
    statecore_home: StatecoreConfig, backend: type[KeyedStateBackend]
) -> None:
    """A GDPR delete and a corrected total, edited with deltalake, adopted, restored; the next
    run (heap or RocksDB) sees exactly the edit."""
    config, job = statecore_home, "balances"
    records = [(k, ("a", n)) for k, n in [("ann", 5), ("bob", 7), ("cat", 9), ("ann", 1)]]
    run_checkpoint(
        config,
        Mixed(),
        records,
        job=job,
        checkpoint_id=1,
        clock=ManualTimeProvider(1000),
        backend_class=backend,
    )
    folder = export(config, job)
    for state in ("total", "pages", "recent"):
        DeltaTable(f"{folder}/main/keyed/{state}").delete("key = 'bob'")
    DeltaTable(f"{folder}/main/keyed/total").update(
        updates={"value": "100"}, predicate="key = 'cat'"
    )
    with Catalog.connect(config.catalog_url) as catalog:
        adopt_savepoint(config, catalog, "base", job=job, name="fixed")
        restored = restore_savepoint(config, catalog, "fixed", job=job)
    out, _ = run_checkpoint(
        config,
        Mixed(),
        [("ann", ("b", 0)), ("bob", ("b", 0)), ("cat", ("b", 0))],
        job=job,
        checkpoint_id=restored.checkpoint_id + 1,
        clock=ManualTimeProvider(2000),
        backend_class=backend,
    )
    seen = {key: (total, pages, recent) for key, total, pages, recent in out}
    assert seen == {
        "ann": (6, {"a": 2}, ["a", "a"]),
        "bob": (0, {}, []),
        "cat": (100, {"a": 1}, ["a"]),
    }


def test_adopt_checks_timers(clicks: tuple[StatecoreConfig, str]) -> None:
    config, folder = clicks
    timers = f"{folder}/main/timers"
    row = table_rows(timers).to_pylist()[0]
    right = assign_to_key_group(row["key"], 128)
    write_deltalake(
        timers,
        pa.Table.from_pylist(
            [
                dict(row, timestamp=1, key_group=(right + 1) % 128),
                dict(row, timestamp=2, time_domain="wall_clock"),
            ],
            schema=table_rows(timers).schema,
        ),
        mode="append",
    )
    error = refused(config)
    assert sorted((p.key_group, p.expected_key_group) for p in error.problems) == [
        (right, None),
        ((right + 1) % 128, right),
    ]
    assert "time_domain 'wall_clock' is not one of" in str(error)


def test_adopt_broadcast_state_is_the_same_on_every_subtask(home: StatecoreConfig) -> None:
    rows = pa.table(
        {
            "subtask": pa.array([0, 0, 1, 1], pa.int32()),
            "mode": ["broadcast"] * 4,
            "user_key": ["click", "view", "click", "view"],
            "value": [10.0, 20.0, 10.0, 20.0],
        }
    )
    write_checkpoint(home, JOB, 1, {"rules": Table(rows, kind="broadcast", table_kind="operator")})
    folder = export(home)
    rules = f"{folder}/main/operator/rules"
    DeltaTable(rules).update(
        updates={"value": "99.0"}, predicate="subtask = 1 AND user_key = 'view'"
    )
    error = refused(home)
    assert [(p.key, p.key_group) for p in error.problems] == [("view", 1)]
    assert "broadcast value differs from subtask 0's" in error.problems[0].reason
    DeltaTable(rules).update(updates={"value": "99.0"}, predicate="user_key = 'view'")
    adopted = adopt(home, name="fixed")
    table = adopted.tables[0]
    assert {
        (r["subtask"], r["user_key"], r["value"]) for r in rows_of(table.path, table.version)
    } == {
        (0, "click", 10.0),
        (0, "view", 99.0),
        (1, "click", 10.0),
        (1, "view", 99.0),
    }
