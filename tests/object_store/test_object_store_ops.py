"""The warehouse on S3 (a real S3 API server on loopback): checkpoints, SQL, lookups, savepoints
moved between buckets, retention and TTL cleanup with VACUUM; commits racing for one version.

The state is written as the coordinator commits it (:mod:`tests.ops.statebuilder`, no Spark);
:mod:`tests.object_store.test_object_store_spark` runs the Spark runtime on S3.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus
from statecore.checkpoint.points import RestorePoint, checkpoint_point
from statecore.cli import main
from statecore.config import StatecoreConfig
from statecore.errors import CheckpointCommitError, ConcurrentRunError, ConfigError
from statecore.ops.retention import apply_retention
from statecore.ops.savepoint import restore_savepoint, take_savepoint
from statecore.ops.ttl_cleanup import ttl_cleanup
from statecore.query.diff import checksums
from statecore.query.lookup import lookup, lookup_at
from statecore.query.sql import run_sql
from statecore.snapshot.files import write_key_group_file
from statecore.snapshot.rewrite import table_version
from statecore.snapshot.row_groups import WHOLE_FILE_BYTES
from statecore.snapshot.storage import S3Settings, open_table
from statecore.snapshot.table import Fence, SnapshotTable
from statecore.ttl import ManualTimeProvider
from tests.object_store.conftest import S3Server
from tests.ops.conftest import JOB, TTL_MS, tables
from tests.ops.statebuilder import write_checkpoint
from tests.query.test_lookup_row_groups import JOB as BIG
from tests.query.test_lookup_row_groups import write_big_checkpoint

USERS = {f"user-{i}": float(i) for i in range(6)}
"""Few keys, so few files: each is a request to the server."""


def objects(s3: S3Server, uri: str) -> dict[str, int]:
    """Every object under ``uri`` (``s3://bucket/prefix``) with its size."""
    root = uri.removeprefix("s3://")
    infos = s3.filesystem().get_file_info(pafs.FileSelector(root, recursive=True))
    return {i.path[len(root) + 1 :]: i.size for i in infos if i.type == pafs.FileType.File}


def sums(point: RestorePoint) -> list[tuple[str, str, int, str]]:
    return [(c.table_kind, c.state, c.rows, c.checksum) for c in checksums(point)]


def latest(config: StatecoreConfig, job: str = JOB) -> RestorePoint:
    with Catalog.connect(config.catalog_url) as catalog:
        return checkpoint_point(catalog, job)


@pytest.fixture
def s3_job(s3_home: StatecoreConfig) -> StatecoreConfig:
    """Job ``clicks`` with checkpoints 1 to 3 in the S3 warehouse."""
    for checkpoint_id in (1, 2, 3):
        values = dict(USERS, **{f"user-{checkpoint_id}": 100.0 * checkpoint_id})
        write_checkpoint(s3_home, JOB, checkpoint_id, tables(values, 10_000 * checkpoint_id))
    return s3_home


def test_object_store_checkpoints_read_back_with_sql_and_lookups(
    s3_job: StatecoreConfig, s3_server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    point = latest(s3_job)
    assert point.checkpoint_id == 3
    assert all(t.path.startswith(f"{s3_job.warehouse}/{JOB}/") for t in point.tables)
    assert any(
        k.startswith(f"{JOB}/main/keyed/total/_delta_log/")
        for k in objects(s3_server, s3_job.warehouse)
    )
    with Catalog.connect(s3_job.catalog_url) as catalog:
        rows = run_sql(catalog, f"SELECT key, value FROM {JOB}.total WHERE key = 'user-3'")
        at_1 = run_sql(catalog, f"SELECT count(*) AS n FROM {JOB}.total", job=JOB, checkpoint_id=1)
    assert rows.to_pylist() == [{"key": "user-3", "value": 300.0}]
    assert at_1.to_pylist() == [{"n": len(USERS)}]  # time travel on S3
    assert lookup(JOB, "plain", "user-3", config=s3_job).value == 300.0
    assert lookup(JOB, "plain", "user-2", config=s3_job, checkpoint=2).value == 200.0
    capsys.readouterr()
    assert main(["--home", s3_job.home, "sql", f"SELECT sum(value) AS s FROM {JOB}.plain"]) == 0
    assert str(sum(USERS.values()) - USERS["user-3"] + 300.0) in capsys.readouterr().out


def test_object_store_row_group_lookup_reads_one_row_group(s3_home: StatecoreConfig) -> None:
    point = latest(write_big_checkpoint(s3_home, "heap"), BIG)
    [table] = [t for t in point.tables if t.state == "total" and t.table_kind == "keyed"]
    size = table.bytes
    assert size > 2 * WHOLE_FILE_BYTES
    for i in (12_345, 0, 29_999):  # the first reads the footer too (from its last 64 KiB)
        got = lookup_at(point, "total", f"user-{i}")
        assert got.found and got.value.startswith(f"{i:08d}") and got.row_groups_read == 1
        assert got.bytes_read < 0.1 * size
    assert not lookup_at(point, "total", "user-12345x").found


def test_object_store_sql_reads_only_its_tables(
    s3_job: StatecoreConfig, s3_server: S3Server
) -> None:
    """The sandbox holds on S3: another bucket is out of reach, the S3 secret out of sight."""
    with Catalog.connect(s3_job.catalog_url) as catalog:
        with pytest.raises(ConfigError, match="reads only the state tables|disabled"):
            run_sql(catalog, "SELECT * FROM read_parquet('s3://output/**/*.parquet')")
        with pytest.raises(ConfigError, match="S3 secret"):
            run_sql(catalog, "SELECT * FROM duckdb_secrets()")


def test_object_store_savepoint_moves_between_buckets_and_restores(
    s3_job: StatecoreConfig, s3_server: S3Server, tmp_path: Any
) -> None:
    source = latest(s3_job)
    with Catalog.connect(s3_job.catalog_url) as catalog:
        saved = take_savepoint(s3_job, catalog, JOB, name="before-deploy")
    assert saved.savepoint == f"{s3_job.warehouse}/_savepoints/{JOB}/before-deploy"
    moved = f"s3://savepoints/{s3_job.warehouse.rsplit('/', 1)[1]}/before-deploy"
    fs = s3_server.filesystem()
    pafs.copy_files(saved.savepoint.removeprefix("s3://"), moved.removeprefix("s3://"), fs, fs)
    fs.delete_dir(saved.savepoint.removeprefix("s3://"))
    fresh = StatecoreConfig.resolve(
        home=str(tmp_path / "fresh"), warehouse=f"{s3_job.warehouse}-restored", env={}
    )
    with Catalog.connect(fresh.catalog_url) as catalog:
        record = restore_savepoint(fresh, catalog, moved, job="clicks2")
    assert record.kind is CheckpointKind.MAINTENANCE
    restored = latest(fresh, "clicks2")
    assert all(t.path.startswith(f"{fresh.warehouse}/clicks2/") for t in restored.tables)
    assert sums(restored) == sums(source)
    with Catalog.connect(fresh.catalog_url) as catalog:
        rows = run_sql(catalog, "SELECT value FROM clicks2.plain WHERE key = 'user-3'")
    assert rows.to_pylist() == [{"value": 300.0}]


def test_object_store_retention_vacuums_what_no_checkpoint_needs(
    s3_job: StatecoreConfig, s3_server: S3Server
) -> None:
    before = objects(s3_server, f"{s3_job.warehouse}/{JOB}")
    with Catalog.connect(s3_job.catalog_url) as catalog:
        kept = sums(checkpoint_point(catalog, JOB, 3))
        report = apply_retention(s3_job, catalog, JOB, retain=1, vacuum_after=timedelta(0))
        assert (report.retained, report.expired) == ((3,), (1, 2))
        assert catalog.get_checkpoint(JOB, 1).status is CheckpointStatus.EXPIRED
        assert sums(checkpoint_point(catalog, JOB, 3)) == kept
    after = objects(s3_server, f"{s3_job.warehouse}/{JOB}")
    deleted = set(before) - set(after)
    assert report.files_deleted == len(deleted) > 0
    assert report.bytes_reclaimed == sum(before[f] for f in deleted)
    assert not any("_delta_log" in f for f in deleted)


def test_object_store_ttl_cleanup_with_vacuum(s3_job: StatecoreConfig, s3_server: S3Server) -> None:
    now = 30_000 + TTL_MS + 2  # the entries of checkpoint 3 stamped up to 30_002 expired
    before = objects(s3_server, f"{s3_job.warehouse}/{JOB}")
    with Catalog.connect(s3_job.catalog_url) as catalog:
        apply_retention(s3_job, catalog, JOB, retain=1, vacuum_after=None)  # 1, 2 expire
        report = ttl_cleanup(
            s3_job,
            catalog,
            JOB,
            time_provider=ManualTimeProvider(now),
            vacuum_after=timedelta(0),
        )
        assert report.expired > 0 and report.checkpoint_id is not None
        rows = run_sql(catalog, f"SELECT count(*) AS n FROM {JOB}.total")
    assert rows.to_pylist() == [{"n": len(USERS) - 3}]
    assert sum(len(v.files) for v in report.vacuumed) > 0
    after = objects(s3_server, f"{s3_job.warehouse}/{JOB}")
    assert set(before) - set(after)  # VACUUM deleted the files of 1 and 2 on S3


def _key_group_files(uri: str, checkpoint_id: int, value: float) -> list[Any]:
    rows = pa.table({"key": ["k"], "value": [value]})
    return [write_key_group_file(uri, 7, rows, checkpoint_id=checkpoint_id, subtask=0)]


def test_object_store_commits_racing_for_one_version_have_one_winner(
    s3_env: S3Server, s3_home: StatecoreConfig
) -> None:
    """Two writers of one table, both at version v, commit at once: the server holds both
    commit files until both have arrived, so they race for ``v + 1`` on the wire. S3's
    conditional put lets exactly one create it; the other fails and changes nothing."""
    uri = f"{s3_home.warehouse}/race/main/keyed/total"
    schema = pa.schema([("key", pa.string()), ("value", pa.float64())])
    fence = Fence("race", 1)

    def commit(table: SnapshotTable, checkpoint_id: int, value: float) -> int:
        return table.commit(
            _key_group_files(uri, checkpoint_id, value),
            changed_key_groups=[7],
            base_version=table_version(uri),
            app_id="race",
            checkpoint_id=checkpoint_id,
            fence=fence,
        )

    base = commit(SnapshotTable(uri, schema, label="race/main/total"), 1, 1.0)
    writers = [SnapshotTable(uri, schema, label=f"race/main/total#{i}") for i in (0, 1)]
    for w in writers:
        w.files(base)  # both open the table at the same version
    files = [_key_group_files(uri, 2, float(10 + i)) for i in (0, 1)]
    s3_env.gate(f"{uri.removeprefix('s3://')}/_delta_log/{base + 1:020d}.json")
    outcomes: list[Any] = [None, None]

    def run(i: int) -> None:
        try:
            outcomes[i] = writers[i].commit(
                files[i],
                changed_key_groups=[7],
                base_version=base,
                app_id="race",
                checkpoint_id=2,
                fence=fence,
            )
        except (CheckpointCommitError, ConcurrentRunError) as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    won = [i for i, o in enumerate(outcomes) if o == base + 1]
    lost = [o for o in outcomes if isinstance(o, Exception)]
    assert len(won) == 1 and len(lost) == 1, outcomes
    table = open_table(uri)
    assert table.version() == base + 1  # the loser committed nothing, not even later
    [path] = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
    assert path == files[won[0]][0].path


def test_object_store_refuses_the_unsafe_rename_opt_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "true")
    with pytest.raises(ConfigError, match="conditional puts"):
        S3Settings.from_env()
