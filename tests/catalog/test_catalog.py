"""The checkpoint catalog, against SQLite and Postgres (see conftest.py)."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from statecore.catalog import (
    SCHEMA_VERSION,
    Catalog,
    CheckpointKind,
    CheckpointRecord,
    CheckpointStatus,
    StateRecord,
    TableVersion,
)
from statecore.catalog.migrations import MIGRATIONS
from statecore.catalog.models import Base
from statecore.errors import (
    CheckpointCommitError,
    CheckpointNotFoundError,
    ConfigError,
    JobNotFoundError,
)

JOB = "clicks"
CHECKPOINT = CheckpointKind.CHECKPOINT


def _table(state: str = "total", *, version: int = 1, kind: str = "keyed") -> TableVersion:
    return TableVersion(
        operator="count",
        state=state,
        table_kind=kind,
        path=f"/warehouse/{JOB}/count/{kind}/{state}",
        version=version,
        rows=7,
        bytes=700,
        key_groups={3: (4, 400), 0: (3, 300)},
    )


def _state(name: str, *, kind: str = "value", operator: str = "count") -> StateRecord:
    return StateRecord(
        job=JOB,
        operator=operator,
        name=name,
        kind=kind,
        descriptor={"name": name, "type": "int64", "default": None},
        schema=f"arrow-schema-of-{name}",
        ttl=None,
    )


def _begin(catalog: Catalog, checkpoint_id: int, **overrides: object) -> CheckpointRecord:
    args: dict[str, object] = {"kind": CHECKPOINT, "parallelism": 2, "max_parallelism": 128}
    args.update(overrides)
    return catalog.begin_checkpoint(JOB, checkpoint_id, **args)  # type: ignore[arg-type]


def _completed(catalog: Catalog, checkpoint_id: int, *tables: TableVersion) -> CheckpointRecord:
    _begin(catalog, checkpoint_id)
    return catalog.complete_checkpoint(JOB, checkpoint_id, tables=tables)


@pytest.fixture
def job_catalog(catalog: Catalog) -> Catalog:
    catalog.ensure_job(JOB, parallelism=2, max_parallelism=128)
    return catalog


# migrations


def test_connect_twice_applies_migrations_once(catalog_url: str) -> None:
    with Catalog.connect(catalog_url) as catalog:
        catalog.ensure_job(JOB, parallelism=1, max_parallelism=128)
    with Catalog.connect(catalog_url) as catalog:
        assert [job.name for job in catalog.list_jobs()] == [JOB]
    engine = sa.create_engine(catalog_url)
    try:
        with engine.connect() as connection:
            versions = connection.exec_driver_sql(
                "SELECT version FROM statecore_schema_version ORDER BY version"
            ).scalars()
            assert list(versions) == [m.version for m in MIGRATIONS]  # each once, in order
    finally:
        engine.dispose()


def test_catalog_newer_than_the_code_is_refused(catalog_url: str) -> None:
    Catalog.connect(catalog_url).close()
    engine = sa.create_engine(catalog_url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql(
                "INSERT INTO statecore_schema_version (version, description, applied_at) "
                f"VALUES ({SCHEMA_VERSION + 1}, 'from the future', CURRENT_TIMESTAMP)"
            )
    finally:
        engine.dispose()
    with pytest.raises(ConfigError, match=f"schema version {SCHEMA_VERSION + 1}.*upgrade"):
        Catalog.connect(catalog_url)


def test_migrated_schema_matches_the_models(catalog: Catalog, catalog_url: str) -> None:
    engine = sa.create_engine(catalog_url)
    try:
        inspector = sa.inspect(engine)
        for table in Base.metadata.sorted_tables:
            columns = {c["name"]: c["nullable"] for c in inspector.get_columns(table.name)}
            assert columns == {c.name: c.nullable for c in table.columns}, table.name
            found = inspector.get_unique_constraints(table.name)
            uniques = {tuple(unique["column_names"]) for unique in found}
            expected = {
                tuple(c.name for c in constraint.columns)
                for constraint in table.constraints
                if isinstance(constraint, sa.UniqueConstraint)
            } | {(c.name,) for c in table.columns if c.unique}
            assert uniques == expected, table.name
    finally:
        engine.dispose()


# jobs


def test_job_lifecycle(catalog: Catalog) -> None:
    created = catalog.ensure_job(JOB, parallelism=2, max_parallelism=128)
    assert (created.name, created.parallelism, created.max_parallelism) == (JOB, 2, 128)
    assert created.created_at.tzinfo is not None
    assert created.created_at.utcoffset() == timedelta(0)

    assert catalog.ensure_job(JOB, parallelism=8, max_parallelism=256) == created
    assert catalog.get_job(JOB) == created
    catalog.ensure_job("aardvark", parallelism=1, max_parallelism=1)
    assert [job.name for job in catalog.list_jobs()] == ["aardvark", JOB]

    rescaled = catalog.set_job_parallelism(JOB, parallelism=4)
    assert (rescaled.parallelism, rescaled.max_parallelism) == (4, 128)
    widened = catalog.set_job_parallelism(JOB, parallelism=4, max_parallelism=512)
    assert widened.max_parallelism == 512
    assert catalog.get_job(JOB).created_at == created.created_at


def test_invalid_parallelism_is_refused(catalog: Catalog) -> None:
    with pytest.raises(ConfigError, match="parallelism 3 must be in"):
        catalog.ensure_job(JOB, parallelism=3, max_parallelism=2)
    with pytest.raises(ConfigError, match="max parallelism 40000"):
        catalog.ensure_job(JOB, parallelism=1, max_parallelism=40000)
    with pytest.raises(ConfigError, match="job name"):
        catalog.ensure_job("", parallelism=1, max_parallelism=128)
    catalog.ensure_job(JOB, parallelism=2, max_parallelism=128)
    with pytest.raises(ConfigError, match="parallelism 129"):
        catalog.set_job_parallelism(JOB, parallelism=129)
    assert catalog.get_job(JOB).parallelism == 2


def test_unknown_job_is_named_with_the_known_ones(catalog: Catalog) -> None:
    with pytest.raises(JobNotFoundError, match="job 'nope' .* it has no jobs"):
        catalog.get_job("nope")
    catalog.ensure_job(JOB, parallelism=1, max_parallelism=128)
    catalog.ensure_job("views", parallelism=1, max_parallelism=128)
    with pytest.raises(JobNotFoundError, match="job 'nope' .* known jobs: clicks, views"):
        catalog.get_job("nope")
    with pytest.raises(JobNotFoundError, match="'nope'"):
        catalog.begin_checkpoint("nope", 1, kind=CHECKPOINT, parallelism=1, max_parallelism=128)
    for call in (
        lambda: catalog.set_job_parallelism("nope", parallelism=1),
        lambda: catalog.list_states("nope"),
        lambda: catalog.register_states("nope", "count", []),
        lambda: catalog.latest_checkpoint("nope"),
        lambda: catalog.list_checkpoints("nope"),
        lambda: catalog.get_checkpoint("nope", 1),
    ):
        with pytest.raises(JobNotFoundError, match="'nope'"):
            call()


# states


def test_register_states_upserts_by_operator_and_name(job_catalog: Catalog) -> None:
    catalog = job_catalog
    catalog.register_states(JOB, "count", [_state("total"), _state("seen", kind="map")])
    catalog.register_states(JOB, "dedup", [_state("ids", kind="list", operator="dedup")])
    with_ttl = StateRecord(
        job=JOB,
        operator="count",
        name="total",
        kind="reducing",
        descriptor={"name": "total", "type": "float64"},
        schema="arrow-schema-v2",
        ttl={"ttl_seconds": 3600, "update_type": "ON_CREATE_AND_WRITE"},
    )
    catalog.register_states(JOB, "count", [with_ttl])

    assert catalog.list_states(JOB, "count") == [_state("seen", kind="map"), with_ttl]
    assert [(s.operator, s.name) for s in catalog.list_states(JOB)] == [
        ("count", "seen"),
        ("count", "total"),
        ("dedup", "ids"),
    ]
    assert catalog.list_states(JOB, "absent") == []


def test_register_states_refuses_mismatched_or_repeated_states(job_catalog: Catalog) -> None:
    with pytest.raises(ConfigError, match="operator 'count'.*operator 'other'"):
        job_catalog.register_states(JOB, "other", [_state("total")])
    with pytest.raises(ConfigError, match="'total' is given twice"):
        job_catalog.register_states(JOB, "count", [_state("total"), _state("total")])
    assert job_catalog.list_states(JOB) == []


# checkpoints


def test_begin_and_complete(job_catalog: Catalog) -> None:
    catalog = job_catalog
    begun = _begin(catalog, 1, restored_from=None)
    assert begun.status is CheckpointStatus.IN_PROGRESS
    assert begun.kind is CHECKPOINT
    assert (begun.completed_at, begun.duration, begun.tables) == (None, None, ())
    assert begun.started_at.utcoffset() == timedelta(0)
    assert catalog.latest_checkpoint(JOB) is None

    tables = (_table("total"), _table("buffer", kind="operator"), _table("timers", kind="timers"))
    done = catalog.complete_checkpoint(JOB, 1, tables=tables)
    assert done.status is CheckpointStatus.COMPLETED
    assert done.tables == tables
    assert (done.total_rows, done.total_bytes) == (21, 2100)
    assert done.duration is not None and done.duration >= timedelta(0)
    assert done.completed_at is not None and done.completed_at.tzinfo == UTC
    assert catalog.get_checkpoint(JOB, 1) == done
    assert catalog.latest_checkpoint(JOB) == done


def test_tables_and_key_group_sizes_round_trip(job_catalog: Catalog) -> None:
    big = TableVersion(
        operator="count",
        state="total",
        table_kind="keyed",
        path="s3://bucket/warehouse/clicks/count/keyed/total",
        version=123_456,
        rows=5_000_000_000,
        bytes=3 * 2**40,
        key_groups={32767: (2**33, 2**41), 0: (1, 2), 10: (0, 0)},
    )
    _completed(job_catalog, 1, big, _table("other"))
    restored = job_catalog.get_checkpoint(JOB, 1).tables
    assert restored == (big, _table("other"))
    assert list(restored[0].key_groups) == [0, 10, 32767]
    assert restored[0].key_groups[32767] == (2**33, 2**41)


def test_fail_then_retry(job_catalog: Catalog) -> None:
    catalog = job_catalog
    _begin(catalog, 4)
    failed = catalog.fail_checkpoint(JOB, 4, error="executor lost")
    assert (failed.status, failed.error) == (CheckpointStatus.FAILED, "executor lost")
    assert catalog.latest_checkpoint(JOB) is None

    retried = _begin(catalog, 4, parallelism=3)
    assert (retried.status, retried.error, retried.parallelism) == (
        CheckpointStatus.IN_PROGRESS,
        None,
        3,
    )
    assert retried.started_at >= failed.started_at
    done = catalog.complete_checkpoint(JOB, 4, tables=[_table()])
    assert catalog.latest_checkpoint(JOB) == done
    assert [c.checkpoint_id for c in catalog.list_checkpoints(JOB)] == [4]


def test_begin_of_an_in_progress_checkpoint_restarts_it(job_catalog: Catalog) -> None:
    _begin(job_catalog, 2, parallelism=2)
    again = _begin(job_catalog, 2, parallelism=4, kind=CheckpointKind.MAINTENANCE, restored_from=1)
    assert (again.status, again.parallelism, again.kind, again.restored_from) == (
        CheckpointStatus.IN_PROGRESS,
        4,
        CheckpointKind.MAINTENANCE,
        1,
    )
    assert job_catalog.get_checkpoint(JOB, 2) == again


def test_begin_of_a_completed_checkpoint_is_a_replay(job_catalog: Catalog) -> None:
    done = _completed(job_catalog, 9, _table())
    replay = _begin(job_catalog, 9, parallelism=5)
    assert replay == done
    assert job_catalog.get_checkpoint(JOB, 9) == done


def test_latest_is_by_completion_order(job_catalog: Catalog) -> None:
    catalog = job_catalog
    _begin(catalog, 5)
    _begin(catalog, 3)
    catalog.complete_checkpoint(JOB, 5, tables=[_table(version=5)])
    three = catalog.complete_checkpoint(JOB, 3, tables=[_table(version=3)])
    assert catalog.latest_checkpoint(JOB) == three

    _begin(catalog, 6, kind=CheckpointKind.SAVEPOINT)
    savepoint = catalog.complete_checkpoint(JOB, 6, tables=[])
    assert catalog.latest_checkpoint(JOB) == three
    assert catalog.latest_checkpoint(JOB, kinds=[CheckpointKind.SAVEPOINT]) == savepoint
    assert catalog.latest_checkpoint(JOB, kinds=list(CheckpointKind)) == savepoint

    _begin(catalog, 7, kind=CheckpointKind.MAINTENANCE)
    maintenance = catalog.complete_checkpoint(JOB, 7, tables=[])
    assert catalog.latest_checkpoint(JOB) == maintenance
    _begin(catalog, 8)
    assert catalog.latest_checkpoint(JOB) == maintenance  # in progress does not count


def test_complete_of_a_checkpoint_not_in_progress_changes_nothing(job_catalog: Catalog) -> None:
    catalog = job_catalog
    done = _completed(catalog, 1, _table(version=1))
    with pytest.raises(CheckpointCommitError, match="checkpoint 1 of job 'clicks' is COMPLETED"):
        catalog.complete_checkpoint(JOB, 1, tables=[_table(version=2)])
    assert catalog.get_checkpoint(JOB, 1) == done

    _begin(catalog, 2)
    failed = catalog.fail_checkpoint(JOB, 2, error="boom")
    with pytest.raises(CheckpointCommitError, match="checkpoint 2 of job 'clicks' is FAILED"):
        catalog.complete_checkpoint(JOB, 2, tables=[_table()])
    assert catalog.get_checkpoint(JOB, 2) == failed
    assert catalog.latest_checkpoint(JOB) == done


def test_bad_tables_leave_the_checkpoint_in_progress(job_catalog: Catalog) -> None:
    begun = _begin(job_catalog, 1)
    with pytest.raises(CheckpointCommitError, match="checkpoint 1 of job 'clicks'.*twice"):
        job_catalog.complete_checkpoint(JOB, 1, tables=[_table(), _table(version=2)])
    assert job_catalog.get_checkpoint(JOB, 1) == begun
    assert job_catalog.latest_checkpoint(JOB) is None


def test_a_completed_checkpoint_cannot_fail(job_catalog: Catalog) -> None:
    done = _completed(job_catalog, 1, _table())
    with pytest.raises(CheckpointCommitError, match="checkpoint 1 of job 'clicks' is COMPLETED"):
        job_catalog.fail_checkpoint(JOB, 1, error="late failure")
    assert job_catalog.get_checkpoint(JOB, 1) == done


def test_unknown_checkpoint_is_named(job_catalog: Catalog) -> None:
    catalog = job_catalog
    message = "checkpoint 99 of job 'clicks' is not in the checkpoint catalog; it has no checkp"
    with pytest.raises(CheckpointNotFoundError, match=message):
        catalog.get_checkpoint(JOB, 99)
    for checkpoint_id in (1, 2, 10):
        _begin(catalog, checkpoint_id)
    with pytest.raises(CheckpointNotFoundError, match="checkpoint 99 of job 'clicks'.*: 1, 2, 10$"):
        catalog.get_checkpoint(JOB, 99)
    for call in (
        lambda: catalog.complete_checkpoint(JOB, 99, tables=[]),
        lambda: catalog.fail_checkpoint(JOB, 99, error="x"),
        lambda: catalog.delete_checkpoint(JOB, 99),
    ):
        with pytest.raises(CheckpointNotFoundError, match="checkpoint 99 of job 'clicks'"):
            call()


def test_not_found_message_lists_the_latest_checkpoints(job_catalog: Catalog) -> None:
    for checkpoint_id in range(30):
        _begin(job_catalog, checkpoint_id)
    with pytest.raises(CheckpointNotFoundError, match=r"latest 20 checkpoints: 10, 11, .*, 29$"):
        job_catalog.get_checkpoint(JOB, 99)


def test_list_checkpoints_by_id_and_status(job_catalog: Catalog) -> None:
    catalog = job_catalog
    _completed(catalog, 30)
    _begin(catalog, 10)
    _begin(catalog, 20)
    catalog.fail_checkpoint(JOB, 20, error="boom")
    assert [c.checkpoint_id for c in catalog.list_checkpoints(JOB)] == [10, 20, 30]
    by_status = {
        status: [c.checkpoint_id for c in catalog.list_checkpoints(JOB, status=status)]
        for status in CheckpointStatus
    }
    assert by_status == {
        CheckpointStatus.IN_PROGRESS: [10],
        CheckpointStatus.FAILED: [20],
        CheckpointStatus.COMPLETED: [30],
        CheckpointStatus.EXPIRED: [],
    }


def test_delete_checkpoint(job_catalog: Catalog) -> None:
    catalog = job_catalog
    first = _completed(catalog, 1, _table(version=1))
    _completed(catalog, 2, _table(version=2), _table("other", version=2))
    catalog.delete_checkpoint(JOB, 2)
    assert catalog.latest_checkpoint(JOB) == first
    assert [c.checkpoint_id for c in catalog.list_checkpoints(JOB)] == [1]
    again = _completed(catalog, 2, _table(version=3))
    assert again.tables == (_table(version=3),)
    assert catalog.latest_checkpoint(JOB) == again


def test_checkpoints_belong_to_their_job(job_catalog: Catalog) -> None:
    catalog = job_catalog
    catalog.ensure_job("views", parallelism=1, max_parallelism=128)
    _completed(catalog, 1, _table())
    catalog.begin_checkpoint("views", 1, kind=CHECKPOINT, parallelism=1, max_parallelism=128)
    views = catalog.complete_checkpoint("views", 1, tables=[])
    assert catalog.latest_checkpoint("views") == views
    assert catalog.get_checkpoint(JOB, 1).tables == (_table(),)


def test_concurrent_first_connects_migrate_once(catalog_url: str) -> None:
    errors: list[BaseException] = []

    def connect() -> None:
        try:
            Catalog.connect(catalog_url).close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=connect) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with Catalog.connect(catalog_url) as catalog:
        assert catalog.list_jobs() == []


def test_concurrent_writers_from_two_catalogs(catalog_url: str) -> None:
    """A Spark driver and a CLI sharing a catalog: interleaved writes all land."""
    with Catalog.connect(catalog_url) as first, Catalog.connect(catalog_url) as second:
        first.ensure_job(JOB, parallelism=1, max_parallelism=128)
        errors: list[BaseException] = []

        def write(catalog: Catalog, ids: range) -> None:
            try:
                for checkpoint_id in ids:
                    _completed(catalog, checkpoint_id, _table(version=checkpoint_id))
                    catalog.ensure_job(JOB, parallelism=1, max_parallelism=128)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [
            threading.Thread(target=write, args=(catalog, range(start, start + 10)))
            for start, catalog in ((0, first), (100, second), (200, first), (300, second))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        completed = second.list_checkpoints(JOB, status=CheckpointStatus.COMPLETED)
        assert len(completed) == 40
        latest = first.latest_checkpoint(JOB)
        assert latest is not None
        assert latest.completed_at == max(c.completed_at for c in completed if c.completed_at)


def test_sqlite_file_shares_well(tmp_path: Path) -> None:
    """SQLite only: the parent directory is made and the file is in WAL mode."""
    path = tmp_path / "a" / "b" / "catalog.db"
    with Catalog.connect(f"sqlite:///{path}") as catalog:
        catalog.ensure_job(JOB, parallelism=1, max_parallelism=128)
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        connection.close()


def test_bad_url_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a SQLAlchemy URL"):
        Catalog.connect("not a url")
    with pytest.raises(ConfigError, match="cannot open checkpoint catalog"):
        Catalog.connect("nosuchdb://host/x")


def test_an_export_recorded_before_pinned_savepoints_reads_as_an_export(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'before.db'}"
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:  # a catalog at the version before pins
            for step in MIGRATIONS:
                if step.version < 8:
                    step.apply(connection)
            connection.exec_driver_sql(
                "CREATE TABLE statecore_schema_version (version INTEGER PRIMARY KEY, "
                "description VARCHAR(200) NOT NULL, applied_at DATETIME NOT NULL)"
            )
            for step in MIGRATIONS:
                if step.version < 8:
                    connection.exec_driver_sql(
                        "INSERT INTO statecore_schema_version VALUES (?, ?, CURRENT_TIMESTAMP)",
                        (step.version, step.description),
                    )
            connection.exec_driver_sql(
                "INSERT INTO statecore_jobs (id, name, parallelism, max_parallelism, created_at, "
                "last_completion_seq) VALUES (1, 'clicks', 2, 128, CURRENT_TIMESTAMP, 0)"
            )
            connection.exec_driver_sql(
                "INSERT INTO statecore_savepoints (job_id, name, path, reason, source_checkpoint, "
                "parallelism, max_parallelism, rows, bytes, created_at) VALUES "
                "(1, 'old', '/sp/old', 'manual', 2, 2, 128, 10, 100, CURRENT_TIMESTAMP)"
            )
    finally:
        engine.dispose()
    with Catalog.connect(url) as catalog:
        [record] = catalog.list_savepoints("clicks")
    assert (record.name, record.kind, record.pin, record.path) == ("old", "export", None, "/sp/old")
